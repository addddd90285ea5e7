"""What code inside an agent's workspace imports: the visible data, the task's reward, grading.

    from rlbench import sdk
    for item in sdk.train(): ...
    sdk.reward(completion_text, item["answer"])      # tasks whose items carry answers
    sdk.rewards(items, completion_texts)             # any task: local, or the reward endpoint
    sdk.submit("runs/grpo/final", recipe="python train.py seed={seed}")
    sdk.sweep("design.yaml")   # a Ray Tune sweep of a design, run by the harness
"""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path
from typing import Any

from rlbench.grading.client import claim, status, submit, sweep


def root() -> Path:
    """The workspace: RLBENCH_WORKSPACE (set in every sandboxed command), else the current folder."""
    return Path(os.environ.get("RLBENCH_WORKSPACE") or os.getcwd())


@lru_cache(maxsize=None)
def task() -> Any:
    from rlbench.tasks.public import load_workspace_task

    return load_workspace_task(root())


def train() -> list[dict[str, Any]]:
    from rlbench.io import read_jsonl

    return read_jsonl(root() / "data" / "train.jsonl")


def dev() -> list[dict[str, Any]]:
    from rlbench.io import read_jsonl

    return read_jsonl(root() / "data" / "dev.jsonl")


def model_path() -> str:
    return str(root() / "model")


def reward(text: str, answer: Any) -> float:
    """The task's own reward: the same function the harness grades with (needs the answer, so
    only on tasks whose items carry one; elsewhere use `rewards`)."""
    from rlbench.rewards import get_reward

    spec = task().reward
    return get_reward(spec.name)(text, answer, **spec.params)


def rewards(items: list[dict[str, Any]], texts: list[str]) -> list[float]:
    """One reward per (item, completion): computed here when the items carry answers, else asked of
    the grading server's reward endpoint (counted against the task's reward query budget)."""
    from rlbench.rewards.source import batch_rewards

    return batch_rewards(task(), items, texts)


__all__ = ["root", "task", "train", "dev", "model_path", "reward", "rewards", "submit", "sweep", "claim", "status"]
