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


MAX_REWARD_LINES = 100_000  # `grade reward FILE`: lines read (the endpoint's own budget counts the rest)
MAX_REWARD_FILE = 256 * 1024 ** 2


def reward_file(path: str) -> dict[str, Any]:
    """`./grade reward FILE.jsonl`: one reward per line `{"id": TRAIN_ID, "completion": TEXT}`, in
    order: computed here where the items carry answers, else by the grading server's reward
    endpoint (counted, as `rewards` is)."""
    import json

    from rlbench.rewards.source import RewardUnavailable

    file = Path(path)
    if not file.is_file() or file.stat().st_size > MAX_REWARD_FILE:
        return {"ok": False, "error": f"{path}: not a file of at most {MAX_REWARD_FILE // 1024 ** 2} MiB"}
    by_id = {it.get("id"): it for it in train()}
    items, texts = [], []
    with file.open() as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            if len(items) >= MAX_REWARD_LINES:
                return {"ok": False, "error": f"{path}: more than {MAX_REWARD_LINES} lines"}
            try:
                row = json.loads(line)
                item, text = by_id[row["id"]], str(row["completion"])
            except (ValueError, KeyError, TypeError):
                return {"ok": False, "error": f"{path}, line {n}: expected {{\"id\": a train item's id, "
                                              f"\"completion\": text}}"}
            items.append(item)
            texts.append(text)
    try:
        return {"ok": True, "rewards": rewards(items, texts)}
    except RewardUnavailable as exc:
        return {"ok": False, "error": str(exc)}


def grade_main(argv: list[str] | None = None) -> None:
    """The workspace's `./grade`: `reward FILE.jsonl` here (it needs the task), the rest in the
    grading client (rlbench/grading/client.py)."""
    import json
    import sys

    from rlbench.grading.client import main

    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["reward"] and len(args) == 2:
        reply = reward_file(args[1])
        print(json.dumps(reply, indent=2))
        raise SystemExit(0 if reply.get("ok") else 1)
    main(args)


__all__ = ["root", "task", "train", "dev", "model_path", "reward", "rewards", "submit", "sweep", "claim", "status",
           "reward_file", "grade_main"]
