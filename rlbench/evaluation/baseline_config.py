"""A task's baseline configuration, trained and scored by the harness (optimize tasks, e.g. hpo-grpo).

An optimize task hands the agent a working but untuned configuration of a reference pipeline and
asks for a better one. The bar is what that configuration itself reaches, so the harness trains it
from the base model (same seed as the cell) and scores it on the hidden splits. Both are cached by
base weights x task version x configuration x seed, under the hidden root, so every agent on the
same task and seed is measured against the same model.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from rlbench.envs import tool_args
from rlbench.evaluation.baseline import BASELINE_SPLITS, evaluate_model
from rlbench.evaluation.engine import resolve_score_engine
from rlbench.evaluation.score import EVAL_VERSION
from rlbench.io import atomic_write_json, read_json
from rlbench.models.zoo import files_hash, resolve_model
from rlbench.paths import scores_root
from rlbench.progress import info
from rlbench.tasks.spec import TaskConfig


def _key(task: TaskConfig, seed: int, engine: str) -> str:
    blob = {"files": files_hash(Path(resolve_model(task.model.base).location)), "eval_version": EVAL_VERSION,
            "engine": engine, "task": task.name, "version": task.version, "pipeline": task.baseline_config.pipeline,
            "settings": dict(task.baseline_config.settings), "seed": seed}
    return hashlib.sha256(json.dumps(blob, sort_keys=True, default=str).encode()).hexdigest()[:20]


def baseline_config_scores(task: TaskConfig, seed: int, device: str = "cpu", engine: str = "auto") -> dict[str, Any]:
    """The evaluation (as evaluate_model returns it) of the task's baseline configuration."""
    from reference_pipelines.registry import load_pipeline_config, run_pipeline

    if not task.baseline_config.pipeline:
        raise ValueError(f"task {task.name} has no baseline_config")
    engine = resolve_score_engine(engine, device, has_tool=bool(tool_args(task)))
    folder = scores_root() / task.name / "baseline-config" / _key(task, seed, engine)
    done = folder / "scores.json"
    try:
        cached = read_json(done)
        if all(isinstance(cached["scores"][s]["per_item"], list) for s in BASELINE_SPLITS):
            return cached
    except (OSError, ValueError, KeyError, TypeError):
        pass  # missing or broken: train and score again
    settings = [f"{k}={v}" for k, v in task.baseline_config.settings.items()]
    cfg = load_pipeline_config(task.baseline_config.pipeline,
                               [f"task={task.name}", f"seed={seed}", f"out={folder / 'run'}", f"device={device}", *settings])
    info(f"{task.name}: training the baseline configuration ({task.baseline_config.pipeline}, seed {seed})")
    summary = run_pipeline(task.baseline_config.pipeline, cfg)
    scores = evaluate_model(summary["checkpoint"], task, BASELINE_SPLITS, device=device, engine=engine)
    scores["baseline_config"] = {"pipeline": task.baseline_config.pipeline, "settings": dict(task.baseline_config.settings),
                                 "seed": seed, "train_seconds": summary["seconds"]}
    atomic_write_json(done, scores)
    return scores
