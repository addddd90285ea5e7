"""The first stage of a cell: the environment its agent works in, built once before any agent
runs. The task with its features, the data, the base model, a fresh workspace, the sandbox
limits and the budget the cell really allows.

The robustness stage builds the environment of a rerun of the chosen recipe the same way, on
another model or seed, with the cell's own feature state (a debug cell's planted bug), and its
grading server offers what the task's features offer there (the reward endpoint; no submissions).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from rlbench.features import GraderContext, TaskFeature, active
from rlbench.progress import timed
from rlbench.sandbox.runner import SandboxConfig
from rlbench.tasks.spec import BudgetConfig, TaskConfig


@dataclass
class CellEnvironment:
    task: TaskConfig
    features: tuple[TaskFeature, ...]
    states: dict[str, dict[str, Any]]  # each feature's prepared state, by its name
    data: Any  # rlbench.data.splits.TaskData: the splits and their fingerprints
    base_path: Path  # the model the agent starts from (the canonical artifact's folder)
    workspace: Path
    limits: SandboxConfig  # the cell's, with what the features hide from the agent
    budget: BudgetConfig  # the task's, with the cell's overrides
    timings: dict[str, float] = field(default_factory=dict)  # seconds of each preparation step

    def state(self, feature: TaskFeature) -> dict[str, Any]:
        return self.states.get(feature.name, {})


def cell_budget(task: TaskConfig, wall_s: float = 0.0, cpu_s: float = 0.0, gpu_s: float = 0.0) -> BudgetConfig:
    """The task's budget with a cell's overrides (0: the task's): what the description, the grader
    and the result state."""
    b = task.budget
    return replace(b, wall_seconds=wall_s or b.wall_seconds, cpu_seconds=cpu_s or b.cpu_seconds,
                   gpu_seconds=gpu_s or b.gpu_seconds)


def sandbox_limits(task: TaskConfig, limits: SandboxConfig, mode: str) -> SandboxConfig:
    """The cell's sandbox settings, showing empty what the task's features keep from the agent
    (the answers' generator, a debug task's bug table and working pipeline), and at least what the
    task's model needs (`limits` in task.yaml: floors, never lowered by a cell)."""
    hidden = [p for f in active(task) for p in f.hidden_paths(task)]
    floors = {k: max(getattr(limits, k), v) for k in ("memory_gb", "disk_gb", "max_file_gb", "tmp_mb")
              if (v := getattr(task.limits, k)) is not None}
    return replace(limits, mode=mode, hide=sorted({*limits.hide, *hidden}), **floors)


def checkpoint_mb(task: TaskConfig, cell_mb: int) -> int:
    """The largest checkpoint the cell's grader takes: the cell's setting, at least the task's."""
    return max(cell_mb, task.limits.checkpoint_mb or 0)


def prepare_environment(task: TaskConfig, folder: Path, *, seed: int, limits: SandboxConfig, mode: str,
                        budget: BudgetConfig, model: str = "", state_dir: Path | None = None) -> CellEnvironment:
    """Data, base model (`model`, default the task's base), each feature's state (recorded in
    `state_dir`, default `folder`; a state already there is kept) and a fresh workspace in
    `folder/workspace`."""
    from rlbench.data.splits import prepare_data
    from rlbench.harness.workspace import build_workspace
    from rlbench.models.zoo import prompt_base_dir, resolve_model
    from rlbench.tasks.registry import task_dir

    features = active(task)
    times: dict[str, float] = {}
    # prompts are rendered with the task's own base (its chat template), whatever model this environment trains
    with timed(times, "data"):
        data = prepare_data(task, task_dir(task.name), tokenizer_dir=prompt_base_dir(task))
    with timed(times, "base_model"):
        base_path = Path(resolve_model(model or task.model.base).location)
    with timed(times, "features"):
        states = {f.name: f.prepare(task, seed, Path(state_dir or folder)) for f in features}
    with timed(times, "workspace"):
        workspace = build_workspace(Path(folder) / "workspace", task, task_dir(task.name), base_path,
                                    data.splits["train"], data.splits["dev"], states=states,
                                    budget=budget).root.resolve()
    return CellEnvironment(task=task, features=features, states=states, data=data, base_path=base_path,
                           workspace=workspace, limits=sandbox_limits(task, limits, mode), budget=budget,
                           timings=times)


def start_grader(env: CellEnvironment, folder: Path, *, dev_score: Callable[[str], dict[str, Any]] | None = None,
                 run_sweep: Callable[[Path, int], dict[str, Any]] | None = None, max_submissions: int = 0,
                 **server: Any) -> Any:
    """The environment's grading server, with what its features add (the reward endpoint, sweeps).
    Without `dev_score` it takes no submissions (a rerun's server, for the reward endpoint)."""
    from rlbench.grading.server import GradingServer

    ctx = GraderContext(train=env.data.splits["train"], cell_dir=Path(folder), budget=env.budget, run_sweep=run_sweep)
    ops: dict[str, Any] = {}
    for f in env.features:
        ops.update(f.grader_ops(env.task, ctx))
    return GradingServer(folder, env.workspace, env.base_path, env.budget.wall_seconds,
                         max_submissions if dev_score is not None else 0, dev_score, **ops, **server).start()


def needs_grader(env: CellEnvironment) -> bool:
    """Whether a rerun's recipe needs a grading server: a feature serves training there (the reward endpoint)."""
    return any(f.serves_training for f in env.features)
