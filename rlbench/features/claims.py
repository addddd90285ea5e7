"""Claims: the agent states its chosen submission's test gain with a 95% interval
(`./grade claim`), and the judge scores the claim against the harness's measurement. Any task
accepts a claim; evaluate tasks require one."""

from __future__ import annotations

from typing import Any

from rlbench.features.base import JudgeContext, TaskFeature
from rlbench.tasks.spec import BudgetConfig, TaskConfig


class Claims(TaskFeature):
    name = "claims"
    result_key = "claim"

    def applies(self, task: TaskConfig) -> bool:
        return True  # a claim made on any task is scored; only the required ones are described

    def offers_tools(self, task: TaskConfig, budget: BudgetConfig) -> bool:
        return task.claims.required  # `./grade claim` works everywhere; the tool is offered where it is asked for

    def describe(self, task: TaskConfig, budget: BudgetConfig) -> str:
        if not task.claims.required:
            return ""
        return ("- Claims: `./grade claim INDEX GAIN LOW HIGH` states your estimate of submission INDEX's absolute "
                "test gain\n  over the base model with its 95% interval (fractions: 0.12 is +12 points); it is "
                "scored against the\n  harness's measurement.\n")

    def judge(self, ctx: JudgeContext) -> dict[str, Any] | None:
        from rlbench.scoring.claims import score_claim

        claim = (ctx.chosen or {}).get("claim")
        if not (ctx.task.claims.required or claim):
            return None
        return score_claim(claim, ctx.gains["test"])
