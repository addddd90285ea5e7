"""The reward endpoint of the grading server: rewards on train prompts for tasks whose answers
the agent never sees (`reward.access: endpoint`).

Only train ids are scored (dev and the hidden splits never are), at most `limit` completions in
all; a request that would pass the limit is refused whole, so the count an agent reads is exact.
Each completion is scored on its first `max_chars` characters and a request holds at most
MAX_PER_REQUEST of them in a line of at most `max_request_bytes`: both follow the task's
`eval.max_new_tokens` (rlbench/rewards/sizes.py).
Every request is appended to `reward_queries.jsonl` in the cell folder, with its ids, completions
and rewards: what the agent learned from the environment is on record.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Sequence

from rlbench.rewards import get_reward, score_many
from rlbench.rewards.sizes import MAX_PER_REQUEST, completion_chars, request_bytes


class RewardService:
    def __init__(self, task: Any, train: Sequence[dict[str, Any]], limit: int, log_path: Path | None):
        self.name = task.reward.name
        get_reward(self.name)  # an unknown reward fails here, not at the first query
        self.params = dict(task.reward.params)
        # the caps follow the task's completion length (rlbench/rewards/sizes.py): the characters
        # of each completion scored, and the request line the grading server reads for this op
        self.max_chars = completion_chars(task)
        self.max_request_bytes = request_bytes(task)
        self.answers = {it["id"]: it["answer"] for it in train}
        self.limit = int(limit)
        self.used = 0
        self.requests = 0
        self.log_path = Path(log_path) if log_path else None
        self._lock = threading.Lock()
        self.started = time.monotonic()

    @property
    def left(self) -> int:
        return self.limit - self.used

    def query(self, ids: Any, completions: Any) -> dict[str, Any]:
        if not isinstance(ids, list) or not isinstance(completions, list) or len(ids) != len(completions):
            return {"ok": False, "error": "send `ids` and `completions`: two lists of the same length"}
        if not ids:
            return {"ok": True, "rewards": [], "queries_left": self.left}
        if len(ids) > MAX_PER_REQUEST:
            return {"ok": False, "error": f"at most {MAX_PER_REQUEST} completions per request"}
        unknown = [i for i in ids if i not in self.answers]
        if unknown:
            return {"ok": False, "error": f"{len(unknown)} ids are not train ids (e.g. {str(unknown[0])[:40]!r}); "
                                          "rewards are given on train prompts only"}
        with self._lock:
            if self.used + len(ids) > self.limit:
                return {"ok": False, "error": f"reward budget: {self.left} of {self.limit} queries left, "
                                              f"{len(ids)} asked", "queries_left": self.left}
            texts = [str(c)[:self.max_chars] for c in completions]
            rewards = score_many(self.name, self.params, texts, [self.answers[i] for i in ids])
            self.used += len(ids)
            self.requests += 1
            if self.log_path is not None:
                with open(self.log_path, "a") as f:
                    f.write(json.dumps({"t": round(time.monotonic() - self.started, 2), "n": len(ids), "ids": ids,
                                        "completions": texts, "rewards": rewards, "used": self.used}) + "\n")
            return {"ok": True, "rewards": rewards, "queries_left": self.left}

    def summary(self) -> dict[str, Any]:
        return {"limit": self.limit, "used": self.used, "requests": self.requests}
