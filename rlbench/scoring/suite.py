"""A suite's scores: every cell's gains with intervals, normalized against the null and reference
agents of the same task and seed, capability metrics, robustness, and per agent x task aggregates
across seeds. Written to SUITE/scores.json and SUITE/scores.csv. The greedy gain stands beside the
sampled one, with the flag of a cell whose sampled gain came with no greedy gain."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from typing import Any, Sequence

from rlbench.scoring.seeds import across_seeds

NULL, REFERENCE = "null", "reference"


def _test_gain(r: dict[str, Any] | None) -> float | None:
    g = ((r or {}).get("gains") or {}).get("test")
    if g is not None:
        return g["abs"]
    # a finished cell without a graded submission scores as the base model, like the null agent
    # (harness_broken too: an agent that broke the harness never gains by it)
    return 0.0 if r and r.get("status") in ("no_submission", "invalid_submission", "budget_exceeded",
                                            "harness_broken") else None


def _ratio(x: float | None, lo: float | None, hi: float | None) -> float | None:
    """(x - lo) / (hi - lo); undefined unless the reference beats the floor."""
    if x is None or lo is None or hi is None or hi - lo <= 1e-9:
        return None
    return (x - lo) / (hi - lo)


def _greedy(test: dict[str, Any] | None, flag: dict[str, Any] | None) -> dict[str, Any]:
    """The paired greedy test gain beside the sampled one, and the sampling-only flag (a sampled
    gain with no greedy gain: sharper sampling, not RL)."""
    g = (test or {}).get("greedy")
    return {"greedy_gain": g["abs"] if g else None, "greedy_ci": [g["ci_low"], g["ci_high"]] if g else None,
            "greedy_significant": g["significant"] if g else None,
            "sampling_only": (flag or {}).get("flag") if flag else None,
            "sampling_only_reason": (flag or {}).get("reason") if flag else None}


def score_row(r: dict[str, Any], null: dict[str, Any] | None, ref: dict[str, Any] | None) -> dict[str, Any]:
    gains, caps, rob = r.get("gains") or {}, r.get("capabilities") or {}, r.get("robustness") or {}
    test, held = gains.get("test"), gains.get("heldout")
    row: dict[str, Any] = {
        "cell": r.get("cell"), "agent": r.get("agent"), "task": r.get("task"), "seed": r.get("seed"),
        "status": r.get("status"), "sandboxed": r.get("sandboxed"),
        "baseline_test": ((r.get("baseline") or {}).get("test") or {}).get("pass_at_1"),
        "test": ((r.get("scores") or {}).get("test") or {}).get("pass_at_1"),
        "dev_at_submit": (r.get("chosen_checkpoint") or {}).get("dev_at_submit"),
        "abs_gain": test["abs"] if test else None,
        "abs_ci": [test["ci_low"], test["ci_high"]] if test else None,
        "rel_gain_pct": test.get("rel_pct") if test else None,
        "rel_ci": [test.get("rel_ci_low"), test.get("rel_ci_high")] if test else None,
        "significant": test.get("significant") if test else None,
        **_greedy(test, r.get("sampling_only_gain")),
        "heldout_gain": held["abs"] if held else None,
        "heldout_ci": [held["ci_low"], held["ci_high"]] if held else None,
        "normalized": _ratio(_test_gain(r), _test_gain(null), _test_gain(ref)),
        **{k: caps.get(k) for k in ("autonomy", "recovery", "correctness", "execution_seconds", "peak_memory_mb",
                                    "valid_submission_rate", "base_model_submissions", "time_to_best_s", "best_dev")},
    }
    integ, gap, any_ = r.get("integrity") or {}, r.get("dev_test_gap") or {}, r.get("anytime") or {}
    row.update(integrity=integ.get("verdict"), integrity_reasons=integ.get("reasons"),
               reward_hacking=(r.get("reward_hacking") or {}).get("flagged"), wave=r.get("wave") or "",
               dev_test_gap=gap.get("gap"), dev_test_excess=gap.get("excess"),
               anytime_gain=any_.get("anytime_gain"), gain_per_cpu_hour=any_.get("gain_per_cpu_hour"),
               cpu_seconds=(r.get("compute") or {}).get("cpu_s"))
    ref_caps = (ref or {}).get("capabilities") or {}
    row["optimization"] = (caps["best_dev"] / ref_caps["best_dev"]
                           if caps.get("best_dev") is not None and ref_caps.get("best_dev") else None)
    vs = (r.get("vs_baseline_config") or {}).get("gains", {}).get("test")
    if vs:
        ref_vs = ((ref or {}).get("vs_baseline_config") or {}).get("gains", {}).get("test")
        row.update(vs_baseline_config=vs["abs"], vs_baseline_config_ci=[vs["ci_low"], vs["ci_high"]],
                   vs_baseline_config_significant=vs["significant"],
                   closeness_to_reference=_ratio(vs["abs"], 0.0, ref_vs["abs"] if ref_vs else None))
    seeds = (rob.get("seeds") or {}).get("test")
    if seeds:
        row.update(robust_seeds=seeds["n"], robust_mean=seeds["mean"], robust_sd=seeds["sd"],
                   robust_ci=[seeds["ci_low"], seeds["ci_high"]] if seeds["ci_low"] is not None else None)
    if rob.get("scale"):
        sc = rob["scale"]
        row.update(scale_gain=(sc.get("gains") or {}).get("test", {}).get("abs"), scalability=sc["holds"])
    return row


def score_suite(results: Sequence[dict[str, Any]]) -> dict[str, Any]:
    by_cell = {(r.get("agent"), r.get("task"), r.get("seed")): r for r in results}
    rows = [score_row(r, by_cell.get((NULL, r.get("task"), r.get("seed"))),
                      by_cell.get((REFERENCE, r.get("task"), r.get("seed")))) for r in results]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["agent"], row["task"])].append(row)
    aggregates = []
    for (agent, task), members in groups.items():
        agg: dict[str, Any] = {"agent": agent, "task": task, "seeds": [m["seed"] for m in members],
                               "ok": sum(1 for m in members if m["status"] == "ok")}
        for key in ("abs_gain", "greedy_gain", "heldout_gain", "normalized"):
            values = [m[key] for m in members if m[key] is not None]
            agg[key] = across_seeds(values) if values else None
        agg["sampling_only"] = sum(1 for m in members if m.get("sampling_only"))
        aggregates.append(agg)
    return {"cells": rows, "aggregates": aggregates}


CSV_FIELDS = ("agent", "task", "seed", "status", "baseline_test", "test", "abs_gain", "abs_ci", "rel_gain_pct",
              "significant", "greedy_gain", "greedy_ci", "sampling_only", "heldout_gain", "heldout_ci", "normalized", "vs_baseline_config", "vs_baseline_config_ci",
              "closeness_to_reference", "robust_seeds", "robust_mean", "robust_ci", "scale_gain", "scalability",
              "autonomy", "recovery", "correctness", "optimization", "execution_seconds", "peak_memory_mb",
              "valid_submission_rate", "base_model_submissions", "dev_at_submit", "dev_test_gap", "dev_test_excess",
              "anytime_gain", "gain_per_cpu_hour", "cpu_seconds", "integrity", "reward_hacking", "wave", "sandboxed",
              "cell")


def scores_csv(scores: dict[str, Any]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(CSV_FIELDS)
    for row in scores["cells"]:
        w.writerow([_cell(row.get(k)) for k in CSV_FIELDS])
    return buf.getvalue()


def _cell(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.4f}"
    if isinstance(v, list):
        return "[" + ", ".join(_cell(x) for x in v) + "]"
    return str(v)
