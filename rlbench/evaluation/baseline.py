"""Baseline scores of a task's base model, cached by model hash x task version x protocol.

A cached score is only reused when everything that could change it is equal: the weights (by
content hash, not by name), the task version, the data fingerprints, the reward and the protocol.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Sequence

from rlbench.config.core import to_dict
from rlbench.data.splits import prepare_data
from rlbench.evaluation.score import score_split
from rlbench.io import atomic_write_json, read_json
from rlbench.models.zoo import load_model, weights_hash
from rlbench.paths import scores_root
from rlbench.progress import info
from rlbench.tasks.registry import task_dir
from rlbench.tasks.spec import HIDDEN_SPLITS, TaskConfig

BASELINE_SPLITS = ("dev", "test", "heldout")


def eval_key(weights: str, task: TaskConfig, fingerprints: dict[str, str], splits: Sequence[str]) -> str:
    blob = {
        "weights": weights,
        "task": task.name,
        "version": task.version,
        "protocol": to_dict(task.eval),
        "reward": to_dict(task.reward),
        "metric": task.metric.value,
        "data": {s: fingerprints[s] for s in splits},
    }
    return hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:20]


def evaluate_model(
    model_ref: str,
    task: TaskConfig,
    splits: Sequence[str] = BASELINE_SPLITS,
    device: str = "cpu",
    use_cache: bool = True,
) -> dict[str, Any]:
    """Scores of `model_ref` on `splits` of `task`; cached under the hidden root."""
    import torch

    data = prepare_data(task, task_dir(task.name))
    model, tokenizer, resolved = load_model(model_ref, device=device)
    weights = weights_hash(Path(resolved.location)) if resolved.kind != "hub" else resolved.location
    key = eval_key(weights, task, data.fingerprints, splits)
    cache = scores_root() / task.name / f"{key}.json"
    if use_cache and cache.is_file():
        result = read_json(cache)
        result["cached"] = True
        result["path"] = str(cache)
        return result
    started = time.monotonic()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    scores = {}
    for split in splits:
        s = score_split(model, tokenizer, data.splits[split], split, task)
        scores[split] = {**s.summary(), "per_item": [round(v, 4) for v in s.per_item]}
        if not s.ci_ok and split in HIDDEN_SPLITS:  # dev is feedback, sized for speed
            info(f"[yellow]warning[/]: {split} 95% interval ±{s.halfwidth:.3f} is wider than "
                 f"eval.max_ci_halfwidth={task.eval.max_ci_halfwidth}; raise data.sizes.{split} "
                 "or eval.samples_per_prompt")
    result = {
        "task": task.name,
        "version": task.version,
        "model": model_ref,
        "model_location": resolved.location,
        "weights_hash": weights,
        "protocol": to_dict(task.eval),
        "fingerprints": {s: data.fingerprints[s] for s in splits},
        "scores": scores,
        "eval_seconds": round(time.monotonic() - started, 1),
        "key": key,
        "cached": False,
    }
    atomic_write_json(cache, result)
    result["path"] = str(cache)
    return result


def baseline(task: TaskConfig, device: str = "cpu", use_cache: bool = True) -> dict[str, Any]:
    return evaluate_model(task.model.base, task, BASELINE_SPLITS, device=device, use_cache=use_cache)
