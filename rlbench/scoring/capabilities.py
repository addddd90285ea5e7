"""The agent capabilities and pipeline qualities of one cell, from what the harness recorded.

Inputs are the trajectory (one record per tool call, written by the ToolBox) and the grading
server's submission log; nothing an agent wrote about itself is read.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlbench.results import Capabilities

EXECUTIONS = ("exec", "python")


def _ran(step: dict[str, Any]) -> bool:
    """An execution the agent ran to its end (not one refused because the budget was spent)."""
    result = step.get("result") or {}
    return step.get("tool") in EXECUTIONS and "returncode" in result


def capabilities(trajectory: Sequence[dict[str, Any]], submissions: Sequence[dict[str, Any]], status: str,
                 base_hash: str = "") -> Capabilities:
    """autonomy: a valid submission within the budget, with no harness intervention (status ok);
    recovery: of the executions that failed, the share followed later by a successful one;
    correctness: the share of executions that exit 0; efficiency: wall and CPU seconds of the
    executions and of sweeps, and the peak memory of one execution; plus the submission metrics
    peers publish (valid-submission rate, base-model resubmissions, time to first and best)."""
    runs = [s for s in trajectory if _ran(s)]
    ok = [bool(s["result"].get("ok")) for s in runs]
    failures = [i for i, good in enumerate(ok) if not good]
    recovered = [i for i in failures if any(ok[i + 1:])]
    rss = [s["result"]["max_rss_mb"] for s in runs if s["result"].get("max_rss_mb") is not None]
    valid = [s for s in submissions if s.get("ok")]
    scored = [s for s in valid if s.get("dev") is not None]
    best = max(scored, key=lambda s: s["dev"]) if scored else None
    return {
        "autonomy": status == "ok",
        "executions": len(runs),
        "failed_executions": len(failures),
        "recovery": (len(recovered) / len(failures)) if failures else None,
        "recovered": bool(recovered),
        "correctness": (sum(ok) / len(ok)) if ok else None,
        "execution_seconds": round(sum(float(s.get("seconds", 0.0)) for s in runs), 1),
        "execution_cpu_seconds": round(sum(float(s.get("cpu_s", 0.0)) for s in runs), 1),
        # the harness's sweeps train too: their wall time is the agent's training time as well
        "sweep_seconds": round(sum(float(s.get("seconds", 0.0)) for s in trajectory if s.get("tool") == "sweep"), 1),
        "peak_memory_mb": max(rss) if rss else None,
        "submissions": len(submissions),
        "valid_submission_rate": (len(valid) / len(submissions)) if submissions else None,
        "base_model_submissions": sum(1 for s in valid if base_hash and s.get("checkpoint_hash") == base_hash),
        "time_to_first_valid_s": valid[0]["t"] if valid else None,
        "time_to_best_s": best["t"] if best else None,
        "best_dev": best["dev"] if best else None,
    }
