"""What the reruns of one cell say: the gain across seeds, and whether it holds on the larger model."""

from __future__ import annotations

from typing import Any, Sequence

from rlbench.results import CellResult, Gain
from rlbench.scoring.seeds import across_seeds

SPLITS = ("test", "heldout")


def summarize(result: CellResult, recipe: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Across the base-model reruns: mean, sd and t interval of each split's absolute gain (and the
    share of reruns whose own bootstrap interval excludes zero). Scale: the one rerun's gains and
    `holds` when its test gain is distinguishable from zero and positive."""
    base = [r for r in runs if r["kind"] == "base"]
    ok = [r for r in base if r["status"] == "ok"]
    out: dict[str, Any] = {
        "cell": result.cell, "agent": result.agent, "task": result.task, "recipe": recipe,
        "seed_varied": "{seed}" in recipe, "reruns": len(base), "succeeded": len(ok),
        "runs": [{k: r.get(k) for k in ("kind", "model", "seed", "status", "reason", "train_seconds", "gains", "scores")}
                 for r in runs],
        "seeds": {},
    }
    for split in SPLITS:
        split_gains = [Gain.from_dict(r["gains"][split]) for r in ok]
        if split_gains:
            values = [g.abs for g in split_gains]
            out["seeds"][split] = {**across_seeds(values), "values": values,
                                   "significant_share": sum(g.significant for g in split_gains) / len(ok)}
    original = result.gain("test")
    if original:
        out["original_test_gain"] = original.abs
    scale = [r for r in runs if r["kind"] == "scale"]
    if scale:
        r = scale[0]
        out["scale"] = {"model": r["model"], "seed": r["seed"], "status": r["status"], "reason": r.get("reason", ""),
                        "gains": r.get("gains"),
                        "holds": bool(r["status"] == "ok" and Gain.from_dict(r["gains"]["test"]).ci_low > 0)}
    return out
