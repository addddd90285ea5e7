"""Ray Tune sweeps of designs the agent hands the grading server (rlbench/tune/), at most
`budget.max_sweeps` per cell."""

from __future__ import annotations

from typing import Any

from rlbench.features.base import GraderContext, TaskFeature
from rlbench.tasks.spec import BudgetConfig, TaskConfig

SWEEPS = """- Sweeps: `./grade sweep design.yaml` hands the harness a design (algorithm grpo, ppo, dpo, sft,
  or custom with `entry_point: train.py`; fixed `hyperparameters`; `preprocessing` (train_limit,
  dedupe); `evaluation` (every, prompts); a `search_space` of choice, grid, uniform or loguniform
  dimensions; `sweep` settings: num_samples, scheduler asha or fifo, grace_period, max_trials). It
  runs a Ray Tune sweep in the sandbox within your budget (at most {n} sweeps), scores each finished
  trial's checkpoint on dev, and returns the trial table and the best configuration; the best
  checkpoint is under `sweeps/NNN/<trial>/checkpoint` and can be submitted as it is (it carries its
  recipe). A custom entry point is run as `python SCRIPT key=value ... out=DIR seed=N` and must write
  `DIR/steps.jsonl` lines with `step` and `dev_greedy`, and its model to `DIR/checkpoint`.
"""


class Sweeps(TaskFeature):
    name = "sweeps"

    def applies(self, task: TaskConfig) -> bool:
        return task.budget.max_sweeps > 0

    def offers_tools(self, task: TaskConfig, budget: BudgetConfig) -> bool:
        return budget.max_sweeps > 0  # the cell's budget decides, as it does for the paragraph

    def describe(self, task: TaskConfig, budget: BudgetConfig) -> str:
        return SWEEPS.format(n=budget.max_sweeps) if budget.max_sweeps else ""

    def grader_ops(self, task: TaskConfig, ctx: GraderContext) -> dict[str, Any]:
        if ctx.run_sweep is None:
            return {}
        return {"sweep": ctx.run_sweep, "max_sweeps": ctx.budget.max_sweeps}
