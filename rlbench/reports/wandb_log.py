"""Weights & Biases logging of cells and sweep trials, offline unless the user opts in.

`wandb=true` on `rlbench run`: every cell becomes a W&B run in group SUITE (its config, its
harness scores and capabilities as the summary, the step logs of its training runs as curves), and
every Tune trial of its sweeps is logged by Ray's WandbLoggerCallback in the same group. WANDB_MODE
defaults to `offline`: runs are written under the suite folder (`wandb/`) and nothing leaves the
machine until the user sets WANDB_MODE=online (or runs `wandb sync`).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from rlbench.results import CellResult


def wandb_mode() -> str:
    from rlbench.progress import quiet

    if quiet():
        os.environ.setdefault("WANDB_SILENT", "true")
    return os.environ.setdefault("WANDB_MODE", "offline")


def _flat(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flat(f"{prefix}/{k}" if prefix else str(k), v, out)
    elif isinstance(value, (int, float, bool, str)) or value is None:
        out[prefix] = value


def log_cell(result: CellResult, group: str, project: str, root: Path) -> Path:
    """One finished cell as a W&B run (under ROOT/wandb/); returns the run's local folder."""
    import wandb

    from rlbench.reports.cell_report import training_runs

    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    config = {"agent": result.agent, "task": result.task, "task_version": result.task_version, "seed": result.seed,
              "sandboxed": result.sandboxed}
    run = wandb.init(project=project, group=group, name=result.cell, job_type="cell", dir=str(root),
                     config=config, mode=wandb_mode(), reinit="finish_previous")
    workspace = Path(result.cell_dir or "") / "workspace"
    for tr in training_runs(workspace) if workspace.is_dir() else []:
        key = tr["run"].replace("/", ".")
        run.define_metric(f"{key}/*", step_metric=f"{key}/step")
        points: dict[int, dict[str, float]] = {}
        for metric, pts in tr["curves"].items():
            for step, v in pts:
                points.setdefault(step, {})[f"{key}/{metric}"] = v
        for step in sorted(points):
            run.log({f"{key}/step": step, **points[step]})
    summary: dict[str, Any] = {"status": result.status.value}
    sections = result.to_json_dict()  # the sections as result.json holds them (a Gain as its JSON object)
    for part in ("gains", "scores", "capabilities", "vs_baseline_config"):
        _flat(part, sections.get(part) or {}, summary)
    run.summary.update(summary)
    folder = Path(run.dir).parent
    run.finish()
    return folder


def tune_callbacks(enabled: bool, project: str, group: str, root: Path) -> list[Any]:
    """Ray Tune's W&B logger for a sweep's trials (same project and group as the cells)."""
    if not enabled:
        return []
    from ray.air.integrations.wandb import WandbLoggerCallback

    Path(root).mkdir(parents=True, exist_ok=True)
    return [WandbLoggerCallback(project=project, group=group or None, mode=wandb_mode(), dir=str(root),
                                job_type="sweep-trial")]
