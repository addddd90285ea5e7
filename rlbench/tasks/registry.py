"""Finding task folders and loading their specs.

A task folder may hold variants (`variants/NAME.yaml`): overrides of its task.yaml, addressed as
`TASK@NAME`. The real tier uses one per task, `@standin`, which runs the same spec against local
stand-ins of its real parts (a stand-in model folder, local files shaped exactly like the hub
dataset), so the whole task runs in CI on a CPU. A variant is a task of its own name everywhere
(results, stored splits, scores), so its numbers are never read as the real task's. In a
variant, a path that starts with `./` is the task folder's (model folders, data files).
"""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

from rlbench.config.core import ConfigError, load_config
from rlbench.paths import tasks_root
from rlbench.tasks.spec import TaskConfig


VARIANT_SEP = "@"
# the variant keys whose values are paths (`./x` is the task folder's x)
_PATH_KEYS = ("model.base", "model.scale", "data.hf.path", "data.hf.data_files", "data.hf.sources")


def split_name(name: str) -> tuple[str, str]:
    """(task, variant) of `TASK@VARIANT`; variant '' for a plain task name."""
    task, _, variant = name.partition(VARIANT_SEP)
    return task, variant


def task_dir(name: str) -> Path:
    """The folder of task `name` (a variant's: its task's), or a clear error listing the tasks that exist."""
    path = tasks_root() / split_name(name)[0]
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
    base, variant = split_name(name)
    path = task_dir(name) / "task.yaml"
    layers: list = [path]
    if variant:
        layers.append({**_variant(path.parent, variant), "name": base})
    task = load_config(TaskConfig, *layers, overrides=overrides, source_name=str(path))
    if task.name != base:
        raise ConfigError(f"{path}: key 'name': value '{task.name}' must equal the folder name '{base}'")
    task.name = name
    if not (path.parent / "description.md").is_file():
        raise ConfigError(f"{path.parent}: description.md is missing (what the agent reads)")
    if task.debug.bugs:
        from rlbench.tasks.planted_bugs import check_kinds

        check_kinds(task.debug)
    return task


def task_file(name: str, filename: str) -> Path:
    """Where a task's record `filename` (validation.json, baseline.json) lives: in its folder, or for
    a variant beside the variant's file (`variants/NAME.validation.json`), never over the real task's."""
    base, variant = split_name(name)
    folder = task_dir(base)
    return folder / "variants" / f"{variant}.{filename}" if variant else folder / filename


def variants(name: str) -> list[str]:
    """The variants a task folder holds (`variants/NAME.yaml`)."""
    folder = task_dir(name) / "variants"
    return sorted(p.stem for p in folder.glob("*.yaml")) if folder.is_dir() else []


def _variant(folder: Path, variant: str) -> dict:
    """A variant's overrides, its `./` and `../` paths made the task folder's (`../gsm8k-grpo/...`:
    a stand-in model two tasks share)."""
    import yaml

    path = folder / "variants" / f"{variant}.yaml"
    if not path.is_file():
        known = ", ".join(variants(folder.name)) or "none"
        raise ConfigError(f"task '{folder.name}' has no variant '{variant}' (its variants: {known})")
    data = yaml.safe_load(path.read_text()) or {}

    def local(value: object) -> object:
        if isinstance(value, str) and value.startswith(("./", "../")):
            return str((folder / value).resolve())
        if isinstance(value, dict):
            return {k: local(v) for k, v in value.items()}
        return value

    for dotted in _PATH_KEYS:
        *parents, last = dotted.split(".")
        node = data
        for part in parents:
            node = node.get(part) if isinstance(node, dict) else None
        if isinstance(node, dict) and last in node:
            node[last] = local(node[last])
    return data


def list_tasks(device: str | None = None) -> list[TaskConfig]:
    """Every task of the tasks folder; with `device`, those a cell on it can run: on `cpu` the CPU
    suite (tasks whose budget names the CPU), on `cuda` every task (the real tier's too)."""
    tasks = [load_task(name) for name in _task_names()]
    if device == "cpu":
        tasks = [t for t in tasks if t.budget.device.value != "cuda"]
    return tasks
