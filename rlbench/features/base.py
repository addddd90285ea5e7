"""The shape of a task feature: one behaviour a task may have (a reward endpoint, sweeps, a planted
bug, a baseline configuration to beat, claims, a KL limit, a tool environment), and every place a
cell touches it, as hooks on one class.

Before, each behaviour was a scatter of `if task.x:` checks over the cell, the workspace builder,
the grader and the robustness stage; adding one meant a tour of the codebase. Now the cell asks
each of `rlbench.features.FEATURES` that applies to the task, stage by stage:

- `hidden_paths`: what the sandbox shows empty (the answers' generator, the bug table);
- `prepare`: harness-side state made before the workspace (the planted bug), kept in the cell folder;
- `build`: files it adds to a fresh workspace (the planted pipeline, the baseline configuration);
- `describe`: its paragraph of the workspace's description;
- `grader_ops`: what it adds to the grading server (the reward endpoint, sweeps);
- `judge`: its section of the result, after the agent (`result_key` names it);
- `offers_tools`: whether the agent tools that need it (`@tool(needs=name)`) are offered.

The shape follows Inspect AI's task of (dataset, solver, scorer) parts and verl's self-registering
estimators: a new behaviour is one module here plus its fields in the task spec.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from rlbench.tasks.spec import BudgetConfig, TaskConfig


@dataclass
class JudgeContext:
    """What a feature's judge may read: the harness's own records, never a file the agent wrote
    unless the feature reads the workspace on purpose (`reads_workspace`)."""

    task: TaskConfig
    seed: int
    device: str
    state: dict[str, Any]  # what its `prepare` returned
    workspace: Path
    chosen: dict[str, Any] | None  # the graded submission (its harness-owned copy at `checkpoint`), if any
    gains: dict[str, Any] = field(default_factory=dict)  # split -> rlbench.results.Gain of the chosen one
    engine: str = "auto"  # the scoring engine (rlbench/evaluation/engine.py): a judge's scores pair with the cell's
    splits: dict[str, list[dict[str, Any]]] = field(default_factory=dict)  # the task's data, hidden splits too


class TaskFeature:
    """A task behaviour; every hook defaults to nothing, so a feature implements only its parts."""

    name: ClassVar[str] = ""
    result_key: ClassVar[str] = ""  # the result.json section `judge` writes ('' if none)
    needs_submission: ClassVar[bool] = True  # judged only when a submission was graded
    reads_workspace: ClassVar[bool] = False  # its judge reads what the agent left: run with a deadline
    serves_training: ClassVar[bool] = False  # its grader op is what a recipe trains with (a rerun needs it too)

    def applies(self, task: TaskConfig) -> bool:
        raise NotImplementedError

    def offers_tools(self, task: TaskConfig, budget: BudgetConfig) -> bool:
        """Whether a cell of `task` with `budget` (the cell's, which may override the task's) is
        offered the agent tools that name this feature (`@tool(needs=...)`, rlbench/harness/tools.py)."""
        return self.applies(task)

    def hidden_paths(self, task: TaskConfig) -> list[str]:
        return []

    def prepare(self, task: TaskConfig, seed: int, cell_dir: Path) -> dict[str, Any]:
        return {}

    def build(self, task: TaskConfig, workspace: Path, state: dict[str, Any]) -> None:
        return None

    def describe(self, task: TaskConfig, budget: BudgetConfig) -> str:
        return ""

    def grader_ops(self, task: TaskConfig, ctx: "GraderContext") -> dict[str, Any]:
        return {}

    def judge(self, ctx: JudgeContext) -> dict[str, Any] | None:
        return None


@dataclass
class GraderContext:
    """What a feature may hand the grading server: the cell's train split, its folder, and the
    cell's own runner for sweeps (the harness's, which meters and validates the trials)."""

    train: list[dict[str, Any]]
    cell_dir: Path
    budget: BudgetConfig
    run_sweep: Any = None  # (design_path, index) -> summary dict; None where sweeps cannot run (a rerun)
