"""Score a trained checkpoint against its task's base model on the hidden splits.

Gains are paired: the same prompts under the same protocol for base and checkpoint, so the
interval of the per-prompt difference is much tighter than the two separate intervals suggest.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlbench.evaluation.baseline import baseline, evaluate_model
from rlbench.evaluation.stats import mean_ci
from rlbench.tasks.spec import TaskConfig

GAIN_SPLITS = ("test", "heldout")


def paired_gain(base: Sequence[float], new: Sequence[float]) -> dict[str, float]:
    if len(base) != len(new):
        raise ValueError("paired gain needs the same items in the same order")
    diffs = [b - a for a, b in zip(base, new)]
    mean, lo, hi = mean_ci(diffs, clamp=False)
    return {"gain": mean, "ci_low": lo, "ci_high": hi}


def score_against_base(checkpoint: str, task: TaskConfig, device: str = "cpu") -> dict[str, Any]:
    base = baseline(task, device=device)
    new = evaluate_model(checkpoint, task, ("dev",) + GAIN_SPLITS, device=device)
    out: dict[str, Any] = {"task": task.name, "checkpoint": checkpoint, "base_model": task.model.base, "splits": {}}
    for split in ("dev",) + GAIN_SPLITS:
        b, s = base["scores"][split], new["scores"][split]
        g = paired_gain(b["per_item"], s["per_item"])
        out["splits"][split] = {
            "base": b["pass_at_1"], "score": s["pass_at_1"], "base_greedy": b["greedy"], "greedy": s["greedy"],
            "abs_gain": g["gain"], "gain_ci_low": g["ci_low"], "gain_ci_high": g["ci_high"],
            "rel_gain_pct": (100 * g["gain"] / b["pass_at_1"]) if b["pass_at_1"] > 0 else None,
        }
    return out
