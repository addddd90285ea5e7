"""Finding task folders and loading their specs."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from rlbench.config.core import ConfigError, load_config
from rlbench.paths import tasks_root
from rlbench.tasks.spec import TaskConfig


def task_dir(name: str) -> Path:
    """The folder of task `name`, or a clear error listing the tasks that exist."""
    path = tasks_root() / name
    if not (path / "task.yaml").is_file():
        known = ", ".join(t for t in _task_names()) or "(none)"
        raise ConfigError(f"unknown task '{name}'; known tasks: {known}")
    return path


def _task_names() -> list[str]:
    root = tasks_root()
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if (p / "task.yaml").is_file())


def load_task(name: str, overrides: Iterable[str] = ()) -> TaskConfig:
    """`name` is a task in the tasks folder, or an agent's workspace folder (its public task.json)."""
    if (Path(name) / "task.json").is_file():
        from rlbench.tasks.public import load_workspace_task

        return load_workspace_task(Path(name), overrides)
    path = task_dir(name) / "task.yaml"
    task = load_config(TaskConfig, path, overrides=overrides, source_name=str(path))
    if task.name != name:
        raise ConfigError(f"{path}: key 'name': value '{task.name}' must equal the folder name '{name}'")
    if not (path.parent / "description.md").is_file():
        raise ConfigError(f"{path.parent}: description.md is missing (what the agent reads)")
    if task.debug.bugs:
        from rlbench.tasks.planted_bugs import check_kinds

        check_kinds(task.debug)
    return task


def list_tasks() -> list[TaskConfig]:
    return [load_task(name) for name in _task_names()]
