"""KL-constrained tasks: the chosen checkpoint's KL to the base on the test prompts; the
constrained gain is the test gain when the limit holds and zero when it does not."""

from __future__ import annotations

from typing import Any

from rlbench.features.base import JudgeContext, TaskFeature
from rlbench.tasks.spec import TaskConfig


class KLLimit(TaskFeature):
    name = "kl_limit"
    result_key = "constraint"

    def applies(self, task: TaskConfig) -> bool:
        return task.constraints.max_kl > 0

    def judge(self, ctx: JudgeContext) -> dict[str, Any] | None:
        from rlbench.evaluation.kl import kl_to_base

        limit = ctx.task.constraints.max_kl
        kl = kl_to_base(ctx.chosen["checkpoint"], ctx.task.model.base, ctx.task, ctx.splits["test"], device=ctx.device)
        ok = kl["kl"] <= limit
        return {"max_kl": limit, **kl, "satisfied": ok, "constrained_gain": ctx.gains["test"].abs if ok else 0.0}
