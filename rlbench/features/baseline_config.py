"""Optimize tasks: a working but untuned configuration of a reference pipeline is given in the
workspace, the harness trains it too from the same base with the cell's seed, and the chosen
checkpoint is judged against it."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from rlbench.features.base import JudgeContext, TaskFeature
from rlbench.tasks.spec import BudgetConfig, TaskConfig

FILE = "baseline_config.yaml"


class BaselineConfiguration(TaskFeature):
    name = "baseline_config"
    result_key = "vs_baseline_config"

    def applies(self, task: TaskConfig) -> bool:
        return bool(task.baseline_config.pipeline)

    def build(self, task: TaskConfig, workspace: Path, state: dict[str, Any]) -> None:
        (workspace / FILE).write_text(yaml.safe_dump(
            {"pipeline": task.baseline_config.pipeline, "settings": dict(task.baseline_config.settings)},
            sort_keys=False))

    def describe(self, task: TaskConfig, budget: BudgetConfig) -> str:
        return (f"- `{FILE}`: the given configuration of the `{task.baseline_config.pipeline}` reference "
                "pipeline that you are asked to improve on.\n")

    def judge(self, ctx: JudgeContext) -> dict[str, Any] | None:
        from rlbench.evaluation.baseline import BASELINE_SPLITS, evaluate_model
        from rlbench.evaluation.baseline_config import baseline_config_scores
        from rlbench.evaluation.gain import GAIN_SPLITS, paired_gains, result_gain

        ref = baseline_config_scores(ctx.task, ctx.seed, device=ctx.device, engine=ctx.engine)
        new = evaluate_model(ctx.chosen["checkpoint"], ctx.task, BASELINE_SPLITS, device=ctx.device, engine=ctx.engine)
        gains = paired_gains(ref, new, GAIN_SPLITS)
        return {"settings": ref["baseline_config"], "scores": {s: ref["scores"][s]["pass_at_1"] for s in GAIN_SPLITS},
                "gains": {s: result_gain(v) for s, v in gains.items()}}
