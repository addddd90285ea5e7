"""The part of a task an agent may read, and how a workspace reads it back.

A workspace's `task.json` is the task spec without the data seed, the generator, the hidden splits
or a debug task's kinds of bug; inside the sandbox (the SDK, the reference pipelines) the task is
loaded from it, with data and model resolved in the workspace."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable

from rlbench.config.core import load_config, to_dict
from rlbench.tasks.spec import TaskConfig


def public_task(task: TaskConfig) -> dict[str, Any]:
    """The task spec an agent may read: the data block keeps only the visible split sizes."""
    spec = to_dict(task)
    spec["data"] = {"source": "workspace", "workspace": ".",
                    "sizes": {k: spec["data"]["sizes"][k] for k in ("train", "dev", "test", "heldout")}}
    spec["model"] = {"base": "model"}
    if task.debug.pipeline:  # the kinds of bug it may hold stay with the harness
        spec["debug"] = {"pipeline": task.debug.pipeline, "bugs": []}
    return spec


def load_workspace_task(root: Path, overrides: Iterable[str] = ()) -> TaskConfig:
    """A TaskConfig from a workspace's task.json; data and model resolve inside the workspace."""
    root = root.resolve()
    task = load_config(TaskConfig, root / "task.json", overrides=overrides, source_name=str(root / "task.json"))
    task.data.workspace = str(root)
    if not Path(task.model.base).is_absolute():
        task.model.base = str(root / task.model.base)
    return task
