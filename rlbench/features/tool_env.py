"""Tasks whose model calls an environment while it generates (rlbench/envs: a calculator, a text
game): the harness scores with the call loop on, and the workspace says how to run it."""

from __future__ import annotations

from rlbench.features.base import TaskFeature
from rlbench.tasks.spec import BudgetConfig, TaskConfig


class ToolEnvironment(TaskFeature):
    name = "tool_env"

    def applies(self, task: TaskConfig) -> bool:
        return bool(task.tools.name)

    def describe(self, task: TaskConfig, budget: BudgetConfig) -> str:
        name, calls = task.tools.name, task.tools.max_calls
        return (f"- Tool: the model may call the `{name}` while it generates, by writing `[EXPR]` (e.g.\n"
                "  `[347*86]`); when it writes `]`, the environment writes the value after it and the model goes on.\n"
                f"  At most {calls} calls per completion; the answer is what follows the last call. The\n"
                "  harness evaluates with this loop; `rlbench.engines.hf_generate.generate(model, tokenizer, prompts,\n"
                f"  SamplingParams(n=..., tool=\"{name}\", max_calls={calls}))` (with\n"
                "  `from rlbench.engines.sampling import SamplingParams`) runs it for you and marks the environment's\n"
                "  tokens (`Completion.tool_mask`, 0 there) so that a trainer can leave them out of its loss; the\n"
                "  reference `grpo` pipeline does.\n")
