"""Debug tasks: the workspace's `pipeline/` is the reference GRPO with one planted bug, chosen per
seed (rlbench/tasks/planted_bugs.py); the sandbox hides the bug table and the working pipeline,
and the judge scores the agent's diagnosis and fix."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlbench.features.base import JudgeContext, TaskFeature
from rlbench.io import atomic_write_json, read_json
from rlbench.tasks.spec import RUN_COMMAND, BudgetConfig, TaskConfig

DEBUG_FILE = "debug.json"  # in the cell folder: the planted bug, the harness's record


class Debug(TaskFeature):
    name = "debug"
    result_key = "debug"
    needs_submission = False  # the diagnosis counts with or without a graded submission
    reads_workspace = True

    def applies(self, task: TaskConfig) -> bool:
        return bool(task.debug.pipeline)

    def hidden_paths(self, task: TaskConfig) -> list[str]:
        from rlbench.tasks.planted_bugs import hidden_from_agent

        return hidden_from_agent(task.debug.pipeline)

    def prepare(self, task: TaskConfig, seed: int, cell_dir: Path) -> dict[str, Any]:
        """The bug for (task, seed), recorded outside the workspace; a cell folder that already has
        one (a robustness rerun of its recipe) keeps it, whatever the rerun's seed."""
        from rlbench.tasks.planted_bugs import choose_bug

        record = Path(cell_dir) / DEBUG_FILE
        if record.is_file():
            return {"bug": read_json(record)["bug"]}
        bug = choose_bug(task.name, seed, task.debug.bugs)
        atomic_write_json(record, {"bug": bug, "pipeline": task.debug.pipeline})
        return {"bug": bug}

    def build(self, task: TaskConfig, workspace: Path, state: dict[str, Any]) -> None:
        from rlbench.tasks.planted_bugs import plant

        if not state.get("bug"):
            raise ValueError(f"task {task.name} is a debug task: its workspace needs the planted bug (prepare first)")
        plant(workspace, state["bug"], task.debug.pipeline)

    def describe(self, task: TaskConfig, budget: BudgetConfig) -> str:
        return (f"- `pipeline/`: a GRPO pipeline (`{RUN_COMMAND}`, every field of its\n"
                "  `GRPOConfig` settable as `key=value`). Write what you found in `DIAGNOSIS.md`.\n")

    def judge(self, ctx: JudgeContext) -> dict[str, Any] | None:
        from rlbench.tasks.planted_bugs import score_debug

        return score_debug(ctx.workspace, ctx.state["bug"], (ctx.chosen or {}).get("recipe", ""))
