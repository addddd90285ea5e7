"""Task specifications and the registry of task folders."""

from rlbench.tasks.spec import TaskConfig
from rlbench.tasks.registry import list_tasks, load_task, task_dir

__all__ = ["TaskConfig", "list_tasks", "load_task", "task_dir"]
