"""Rewards for a batch of completions, wherever the task keeps its answers.

On a task with `reward.access: local` the items carry their answers and the reward is computed in
the caller's process. On `reward.access: endpoint` the workspace holds no answers: the completions
go to the grading server's reward endpoint (`op: reward`), which knows the train answers, counts
every completion against `budget.reward_queries` and logs each query. Pipelines, the SDK and
agents' own code call the same function, so one training script runs on both kinds of task.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlbench.rewards import get_reward

CHUNK = 256  # completions per request: a request line stays far below the server's 64 KiB
MAX_COMPLETION_CHARS = 1000


class RewardUnavailable(RuntimeError):
    """The endpoint refused (budget spent, unknown ids) or cannot be reached."""


def has_answers(items: Sequence[dict[str, Any]]) -> bool:
    return all("answer" in it for it in items)


def batch_rewards(task: Any, items: Sequence[dict[str, Any]], texts: Sequence[str]) -> list[float]:
    """`texts[i]` is a completion of `items[i]["prompt"]`; one reward each, in order."""
    if len(items) != len(texts):
        raise ValueError(f"{len(items)} items for {len(texts)} completions")
    if has_answers(items):
        fn = get_reward(task.reward.name)
        return [float(fn(t, it["answer"], **task.reward.params)) for it, t in zip(items, texts)]
    from rlbench.grading.client import address, request

    rewards: list[float] = []
    for start in range(0, len(items), CHUNK):
        part = items[start:start + CHUNK]
        missing = [i for i, it in enumerate(part) if "id" not in it]
        if missing:
            raise RewardUnavailable("items without answers need their `id` for the reward endpoint")
        reply = request(address(), {"op": "reward", "ids": [it["id"] for it in part],
                                    "completions": [t[:MAX_COMPLETION_CHARS] for t in texts[start:start + CHUNK]]},
                        timeout=300)
        if not reply.get("ok"):
            raise RewardUnavailable(f"reward endpoint: {reply.get('error', 'no answer')}")
        rewards.extend(float(r) for r in reply["rewards"])
    return rewards
