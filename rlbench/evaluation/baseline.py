"""Baseline scores of a task's base model, cached by model hash x task version x protocol.

A cached score is only reused when everything that could change it is equal: every file of the
scored folder (names and bytes, `files_hash`: the weights alone would let two checkpoints that
differ only in generation_config.json share a score), the task version, the data fingerprints, the
reward, the protocol, the harness's evaluation code (`EVAL_VERSION`) and the engine that sampled
(rlbench/evaluation/engine.py: HF and vLLM draw different samples). The cache lives under the
hidden root, which no sandbox mounts, and an entry is checked before it is used: one that does not
parse, names another key, or whose scores do not add up is recomputed.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Sequence

from rlbench.config.core import to_dict
from rlbench.data.splits import prepare_data
from rlbench.envs import tool_args
from rlbench.evaluation.engine import ScoringModel, resolve_score_engine
from rlbench.evaluation.score import EVAL_VERSION, score_split
from rlbench.io import atomic_write_json, read_json
from rlbench.models.zoo import files_hash, prompt_base_dir, resolve_model, weights_hash
from rlbench.paths import scores_root
from rlbench.progress import info
from rlbench.tasks.registry import task_dir
from rlbench.tasks.spec import HIDDEN_SPLITS, TaskConfig

BASELINE_SPLITS = ("dev", "test", "heldout")


def eval_key(files: str, task: TaskConfig, fingerprints: dict[str, str], splits: Sequence[str],
             engine: str = "hf") -> str:
    """`files`: the scored folder's `files_hash` (a hub model: its id)."""
    blob = {
        "files": files,
        "eval_version": EVAL_VERSION,
        "engine": engine,
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
    engine: str = "auto",
) -> dict[str, Any]:
    """Scores of `model_ref` on `splits` of `task`; cached under the hidden root. `engine`: the one
    that samples (rlbench/evaluation/engine.py; auto: vLLM on CUDA where it serves, else HF)."""
    import torch

    engine = resolve_score_engine(engine, device, has_tool=bool(tool_args(task)))
    data = prepare_data(task, task_dir(task.name), tokenizer_dir=prompt_base_dir(task))
    resolved = resolve_model(model_ref)
    weights = weights_hash(Path(resolved.location))  # every kind resolves to a local folder (a hub id: its snapshot)
    key = eval_key(files_hash(Path(resolved.location)), task, data.fingerprints, splits, engine)
    cache = scores_root() / task.name / f"{key}.json"
    sizes = {s: len(data.splits[s]) for s in splits}
    result = _cached(cache, key, sizes) if use_cache else None
    if result is not None:
        result["cached"] = True
        result["path"] = str(cache)
        return result
    started = time.monotonic()
    torch.set_num_threads(max(1, torch.get_num_threads()))
    scorer = ScoringModel.open(resolved.location, engine, device=device)
    scores = {}
    try:
        for split in splits:
            s = score_split(scorer, data.splits[split], split, task)
            scores[split] = {**s.summary(), "per_item": [round(v, 4) for v in s.per_item],
                             "greedy_per_item": [round(v, 4) for v in s.greedy_per_item]}
            if not s.ci_ok and split in HIDDEN_SPLITS:  # dev is feedback, sized for speed
                info(f"[yellow]warning[/]: {split} 95% interval ±{s.halfwidth:.3f} is wider than "
                     f"eval.max_ci_halfwidth={task.eval.max_ci_halfwidth}; raise data.sizes.{split} "
                     "or eval.samples_per_prompt")
    finally:
        scorer.close()
    result = {
        "task": task.name,
        "version": task.version,
        "model": model_ref,
        "model_location": resolved.location,
        "weights_hash": weights,
        "protocol": to_dict(task.eval),
        "fingerprints": {s: data.fingerprints[s] for s in splits},
        "seed_source": data.seed_source,  # secret splits or the task file's public seed
        "scores": scores,
        "eval_seconds": round(time.monotonic() - started, 1),
        "key": key,
        "eval_version": EVAL_VERSION,
        "engine": engine,
        "cached": False,
    }
    atomic_write_json(cache, {**result, "checksum": _checksum(key, scores)})
    result["path"] = str(cache)
    return result


def _checksum(key: str, scores: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps({"key": key, "scores": scores}, sort_keys=True).encode()).hexdigest()


def _cached(path: Path, key: str, sizes: dict[str, int]) -> dict[str, Any] | None:
    """A cache entry that is whole and consistent, else None (recompute): it parses, names this
    key, carries the checksum of its own scores, and every split has one score per item (all
    within [0, 1]) whose mean is the pass@1 it states."""
    try:
        entry = read_json(path)
        scores = entry["scores"]
        if entry.get("key") != key or entry.get("checksum") != _checksum(key, scores):
            return None
        for split, n in sizes.items():
            s = scores[split]
            per_item = s["per_item"]
            if len(per_item) != n or not all(0.0 <= float(v) <= 1.0 for v in per_item):
                return None
            if abs(sum(per_item) / n - float(s["pass_at_1"])) > 1e-3:
                return None
            greedy = s.get("greedy_per_item") or []
            if greedy and (len(greedy) != n or abs(sum(greedy) / n - float(s["greedy"])) > 1e-3):
                return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError, ZeroDivisionError):
        return None
    entry.pop("checksum", None)
    return entry


def baseline(task: TaskConfig, device: str = "cpu", use_cache: bool = True, engine: str = "auto") -> dict[str, Any]:
    return evaluate_model(task.model.base, task, BASELINE_SPLITS, device=device, use_cache=use_cache, engine=engine)
