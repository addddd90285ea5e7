"""`rlbench tasks baselines`: each task's base-model baseline, recorded where every machine can
check it.

A task is the same task everywhere only if its base model (a canonical artifact, pinned by hash)
and its splits score the same. Official test and heldout splits are drawn from a secret per
installation, so no two installations score on the same items; what they share is the public-seed
draw the tests and the README use. This records, per task, the base's score on the public-seed
splits and how far a secret draw may lie from it: the 95% interval of the difference of two
independent draws (rlbench/evaluation/wave_compare.py), measured against this installation's
secret. A fresh installation reproduces the public numbers exactly on a CPU like this one, and its
secret draw lies inside the interval (tests/test_one_benchmark.py checks both).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlbench.io import atomic_write_json, read_json, utc_now
from rlbench.tasks.spec import DataSource, TaskConfig

BASELINE_FILE = "baseline.json"
SPLITS = ("test", "heldout")
# A secret draw misses the 95% interval of its difference from the public one in 1 of 20
# comparisons by chance alone (arith-grpo's test did here: +2.2 against ±2.1), and the suite makes
# 20 of them. "Another task" is a difference past twice that half-width (about 3.9 standard
# errors: by chance about once in 10,000 comparisons).
SAME_TASK_FACTOR = 2.0


def record_baseline(task: TaskConfig) -> dict[str, Any]:
    """The base model's public-seed scores on the hidden splits, the secret draw's, and whether the
    two agree within the interval of their difference (a fixed dataset has no secret draw)."""
    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.evaluation.score import EVAL_VERSION
    from rlbench.evaluation.wave_compare import compare_waves, using_seed_source
    from rlbench.models.zoo import model_identity

    base = task.model.base
    procedural = task.data.source == DataSource.generator
    if procedural:
        cmp = compare_waves(task, [base], ["public", "secret"], SPLITS)
    with using_seed_source("public"):
        public = evaluate_model(base, task, SPLITS)
    splits: dict[str, Any] = {}
    for split in SPLITS:
        s = public["scores"][split]
        row: dict[str, Any] = {"n": s["n"], "pass_at_1": s["pass_at_1"], "ci": [s["ci_low"], s["ci_high"]],
                               "greedy": s["greedy"], "fingerprint": public["fingerprints"][split]}
        if procedural:
            r = next(r for r in cmp["rows"] if r["split"] == split)
            row["secret"] = {"pass_at_1": r["score"], "diff": r["diff"], "diff_halfwidth": r["diff_halfwidth"],
                             "agree": r["agree"], "same_task": same_task(r["diff"], r["diff_halfwidth"])}
        splits[split] = row
    return {"task": task.name, "version": task.version, "base_model": base, "weights_hash": model_identity(base),
            "eval_version": EVAL_VERSION, "protocol": public["protocol"], "splits": splits,
            "agree": all(r.get("secret", {}).get("agree", True) for r in splits.values()),
            "same_task": all(r.get("secret", {}).get("same_task", True) for r in splits.values()),
            "measured": utc_now()}


def same_task(diff: float, halfwidth_95: float) -> bool:
    """Whether a secret draw's difference from the public one is within what chance explains."""
    return abs(diff) <= SAME_TASK_FACTOR * halfwidth_95 + 1e-12


def write_baseline(task: TaskConfig, record: dict[str, Any]) -> Path:
    from rlbench.tasks.registry import task_file

    path = task_file(task.name, BASELINE_FILE)  # a variant's beside its variant file, not over its task's
    atomic_write_json(path, record)
    return path


def recorded_baseline(folder: Path) -> dict[str, Any] | None:
    path = Path(folder) / BASELINE_FILE
    return read_json(path) if path.is_file() else None
