"""What the reruns of one cell say: the gain across seeds, and whether it holds on the larger model."""

from __future__ import annotations

from typing import Any, Sequence

from rlbench.scoring.seeds import across_seeds

SPLITS = ("test", "heldout")


def summarize(result: dict[str, Any], recipe: str, runs: Sequence[dict[str, Any]]) -> dict[str, Any]:
    """Across the base-model reruns: mean, sd and t interval of each split's absolute gain (and the
    share of reruns whose own bootstrap interval excludes zero). Scale: the one rerun's gains and
    `holds` when its test gain is distinguishable from zero and positive."""
    base = [r for r in runs if r["kind"] == "base"]
    ok = [r for r in base if r["status"] == "ok"]
    out: dict[str, Any] = {
        "cell": result.get("cell"), "agent": result.get("agent"), "task": result.get("task"), "recipe": recipe,
        "seed_varied": "{seed}" in recipe, "reruns": len(base), "succeeded": len(ok),
        "runs": [{k: r.get(k) for k in ("kind", "model", "seed", "status", "reason", "train_seconds", "gains", "scores")}
                 for r in runs],
        "seeds": {},
    }
    for split in SPLITS:
        gains = [r["gains"][split]["abs"] for r in ok]
        if gains:
            out["seeds"][split] = {**across_seeds(gains), "values": gains,
                                   "significant_share": sum(r["gains"][split]["significant"] for r in ok) / len(ok)}
    original = (result.get("gains") or {}).get("test")
    if original:
        out["original_test_gain"] = original["abs"]
    scale = [r for r in runs if r["kind"] == "scale"]
    if scale:
        r = scale[0]
        out["scale"] = {"model": r["model"], "seed": r["seed"], "status": r["status"], "reason": r.get("reason", ""),
                        "gains": r.get("gains"),
                        "holds": bool(r["status"] == "ok" and r["gains"]["test"]["ci_low"] > 0)}
    return out
