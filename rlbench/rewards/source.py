"""Rewards for a batch of completions, wherever the task keeps its answers.

On a task with `reward.access: local` the items carry their answers and the reward is computed in
the caller's process. On `reward.access: endpoint` the workspace holds no answers: the completions
go to the grading server's reward endpoint (`op: reward`), which knows the train answers, counts
every completion against `budget.reward_queries` and logs each query. Pipelines, the SDK and
agents' own code call the same function, so one training script runs on both kinds of task.
"""

from __future__ import annotations

import json
from typing import Any, Iterator, Sequence

from rlbench.rewards import score_many
from rlbench.rewards.sizes import CHUNK, completion_chars, request_bytes


class RewardUnavailable(RuntimeError):
    """The endpoint refused (budget spent, unknown ids) or cannot be reached."""


def has_answers(items: Sequence[dict[str, Any]]) -> bool:
    return all("answer" in it for it in items)


def batch_rewards(task: Any, items: Sequence[dict[str, Any]], texts: Sequence[str]) -> list[float]:
    """`texts[i]` is a completion of `items[i]["prompt"]`; one reward each, in order."""
    if len(items) != len(texts):
        raise ValueError(f"{len(items)} items for {len(texts)} completions")
    if has_answers(items):
        return score_many(task.reward.name, task.reward.params, texts, [it["answer"] for it in items])
    from rlbench.grading.client import address, request

    if any("id" not in it for it in items):
        raise RewardUnavailable("items without answers need their `id` for the reward endpoint")
    cut = completion_chars(task)
    rewards: list[float] = []
    for ids, part in packed_requests([it["id"] for it in items], [t[:cut] for t in texts], request_bytes(task)):
        reply = request(address(), {"op": "reward", "ids": ids, "completions": part}, timeout=300)
        if not reply.get("ok"):
            raise RewardUnavailable(f"reward endpoint: {reply.get('error', 'no answer')}")
        rewards.extend(float(r) for r in reply["rewards"])
    return rewards


def packed_requests(ids: Sequence[Any], texts: Sequence[str], max_bytes: int) -> Iterator[tuple[list[Any], list[str]]]:
    """(ids, completions) for consecutive requests, in order: at most CHUNK each, and each request
    line (as grading/client.py's `request` encodes it) within `max_bytes`, the server's cap for the
    task. Counted on the JSON encoding, not the characters: a newline or a non-ASCII character
    takes 2 to 12 bytes there, so the same completions may need more requests than their count says."""
    base = len(json.dumps({"op": "reward", "ids": [], "completions": []})) + 1  # + the newline
    ids_now: list[Any] = []
    texts_now: list[str] = []
    size = base
    for i, t in zip(ids, texts):
        item = len(json.dumps(i)) + len(json.dumps(t)) + 4  # two ", " separators
        if ids_now and (len(ids_now) >= CHUNK or size + item > max_bytes):
            yield ids_now, texts_now
            ids_now, texts_now, size = [], [], base
        ids_now.append(i)
        texts_now.append(t)
        size += item
    if ids_now:
        yield ids_now, texts_now
