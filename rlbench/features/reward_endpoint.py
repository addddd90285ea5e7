"""Rewards only through the grading server: the workspace's items carry no answers, the server
scores train completions up to a quota, and the sandbox shows the generator that would label any
prompt as empty."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from rlbench.features.base import GraderContext, TaskFeature
from rlbench.tasks.spec import BudgetConfig, DataSource, RewardAccess, TaskConfig

REWARD_ENDPOINT = """- Rewards: the items carry no answers. `./grade reward FILE.jsonl` is the only source of
  rewards: one line `{{"id": TRAIN_ID, "completion": TEXT}}` per completion, one reward each back
  (`sdk.rewards(items, texts)` does it for you; the reference pipelines use it by themselves). At
  most {n} completions are scored in all, on train prompts only; every query is logged.
  `./grade status` shows how many are left.
"""


def answers_hidden(task: TaskConfig) -> bool:
    return task.reward.access == RewardAccess.endpoint


def answer_code(task: TaskConfig) -> list[str]:
    """What an endpoint task's sandbox shows empty (SandboxConfig.hide): the task generator's
    module, which labels any prompt (words.apply, a sum, a text game's shortest walk) and would let
    an agent compute train rewards without the counted endpoint. Nothing the sandbox runs imports
    it (the SDK, the reference pipelines, rewards and tools never do). The reward modules stay:
    each only compares a completion with an answer it is given (game_win replays the game on
    rlbench.envs, which the tool loop itself needs), and `rlbench.rewards` imports them all. A
    task folder's `file.py` generator needs nothing: no sandbox mounts task folders."""
    from rlbench.data.generators import generator_module

    name = generator_module(task.data.generator)
    if not answers_hidden(task) or task.data.source != DataSource.generator or not name:
        return []
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:  # validated when the task loaded; nothing there to hide
        return []
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    return [str(origin.resolve())] if origin is not None and origin.is_file() else []


class RewardEndpoint(TaskFeature):
    name = "reward_endpoint"
    serves_training = True

    def applies(self, task: TaskConfig) -> bool:
        return answers_hidden(task)

    def hidden_paths(self, task: TaskConfig) -> list[str]:
        return answer_code(task)

    def describe(self, task: TaskConfig, budget: BudgetConfig) -> str:
        return REWARD_ENDPOINT.format(n=budget.reward_queries)

    def grader_ops(self, task: TaskConfig, ctx: GraderContext) -> dict[str, Any]:
        from rlbench.grading.rewards import RewardService

        return {"rewards": RewardService(task, ctx.train, task.budget.reward_queries,
                                         ctx.cell_dir / "reward_queries.jsonl")}
