"""A suite's scores: every cell's gains with intervals, normalized against the null and reference
agents of the same task and seed, capability metrics, robustness, and per agent x task aggregates
across seeds. Written to SUITE/scores.json and SUITE/scores.csv. The greedy gain stands beside the
sampled one, with the flag of a cell whose sampled gain came with no greedy gain."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from typing import Any, Mapping, Sequence

from rlbench.results import CellResult, CellStatus, Gain
from rlbench.scoring.columns import CELL_COLUMNS, csv_keys
from rlbench.scoring.seeds import across_seeds

NULL, REFERENCE = "null", "reference"


def _test_gain(r: CellResult | None) -> float | None:
    """The test gain a cell is normalized by: its graded gain; 0.0 for a cell that ended without a
    graded submission, which scores as the base model like the null agent (harness_broken too: an
    agent that broke the harness never gains by it); None for a cell with no end (a crash)."""
    if r is None:
        return None
    g = r.gain("test")
    if g is not None:
        return g.abs
    return 0.0 if r.status.ungraded_end else None


def _ratio(x: float | None, lo: float | None, hi: float | None) -> float | None:
    """(x - lo) / (hi - lo); undefined unless the reference beats the floor."""
    if x is None or lo is None or hi is None or hi - lo <= 1e-9:
        return None
    return (x - lo) / (hi - lo)


def _greedy(test: Gain | None, flag: dict[str, Any] | None) -> dict[str, Any]:
    """The paired greedy test gain beside the sampled one, and the sampling-only flag (a sampled
    gain with no greedy gain: sharper sampling, not RL)."""
    g = test.greedy if test is not None else None
    return {"greedy_gain": g.abs if g else None, "greedy_ci": g.ci if g else None,
            "greedy_significant": g.significant if g else None,
            "sampling_only": (flag or {}).get("flag") if flag else None,
            "sampling_only_reason": (flag or {}).get("reason") if flag else None}


def _vs_baseline_config(r: CellResult | None) -> Gain | None:
    """An optimize task's test gain over its baseline configuration (absent on other tasks)."""
    g = (((r.vs_baseline_config if r is not None else None) or {}).get("gains") or {}).get("test")
    return Gain.from_dict(g) if g else None


def score_row(result: CellResult | Mapping[str, Any], null: CellResult | Mapping[str, Any] | None,
              ref: CellResult | Mapping[str, Any] | None) -> dict[str, Any]:
    """One cell's row of scores.json: its gains, normalized between the null and the reference
    agent's cells of the same task and seed, and its capability, integrity and compute figures."""
    r = CellResult.coerce(result)
    null = CellResult.coerce(null) if null is not None else None
    ref = CellResult.coerce(ref) if ref is not None else None
    caps, rob = r.capabilities or {}, r.robustness or {}
    test, held = r.gain("test"), r.gain("heldout")
    row: dict[str, Any] = {
        "cell": r.cell, "agent": r.agent, "task": r.task, "seed": r.seed,
        "status": r.status.value, "sandboxed": r.sandboxed,
        "baseline_test": ((r.baseline or {}).get("test") or {}).get("pass_at_1"),
        "test": ((r.scores or {}).get("test") or {}).get("pass_at_1"),
        "dev_at_submit": (r.chosen_checkpoint or {}).get("dev_at_submit"),
        "abs_gain": test.abs if test else None,
        "abs_ci": test.ci if test else None,
        "rel_gain_pct": test.rel_pct if test else None,
        "rel_ci": [test.rel_ci_low, test.rel_ci_high] if test else None,
        "significant": test.significant if test else None,
        **_greedy(test, r.sampling_only_gain),
        "heldout_gain": held.abs if held else None,
        "heldout_ci": held.ci if held else None,
        "normalized": _ratio(_test_gain(r), _test_gain(null), _test_gain(ref)),
        **{k: caps.get(k) for k in ("autonomy", "recovery", "correctness", "execution_seconds", "peak_memory_mb",
                                    "valid_submission_rate", "base_model_submissions", "time_to_best_s", "best_dev")},
    }
    integ, gap, any_ = r.integrity or {}, r.dev_test_gap or {}, r.anytime or {}
    row.update(integrity=integ.get("verdict"), integrity_reasons=integ.get("reasons"),
               reward_hacking=(r.reward_hacking or {}).get("flagged"), wave=r.wave or "",
               dev_test_gap=gap.get("gap"), dev_test_excess=gap.get("excess"),
               anytime_gain=any_.get("anytime_gain"), gain_per_cpu_hour=any_.get("gain_per_cpu_hour"),
               cpu_seconds=(r.compute or {}).get("cpu_s"))
    ref_caps = (ref.capabilities if ref is not None else None) or {}
    row["optimization"] = (caps["best_dev"] / ref_caps["best_dev"]
                           if caps.get("best_dev") is not None and ref_caps.get("best_dev") else None)
    vs = _vs_baseline_config(r)
    if vs:
        ref_vs = _vs_baseline_config(ref)
        row.update(vs_baseline_config=vs.abs, vs_baseline_config_ci=vs.ci,
                   vs_baseline_config_significant=vs.significant,
                   closeness_to_reference=_ratio(vs.abs, 0.0, ref_vs.abs if ref_vs else None))
    seeds = (rob.get("seeds") or {}).get("test")
    if seeds:
        row.update(robust_seeds=seeds["n"], robust_mean=seeds["mean"], robust_sd=seeds["sd"],
                   robust_ci=[seeds["ci_low"], seeds["ci_high"]] if seeds["ci_low"] is not None else None)
    if rob.get("scale"):
        sc = rob["scale"]
        scale_test = (sc.get("gains") or {}).get("test")
        row.update(scale_gain=Gain.from_dict(scale_test).abs if scale_test else None, scalability=sc["holds"])
    return row


def score_suite(results: Sequence[CellResult | Mapping[str, Any]]) -> dict[str, Any]:
    """scores.json: a row per cell (score_row) and per agent x task the aggregates across seeds."""
    cells = [CellResult.coerce(r) for r in results]
    by_cell = {(r.agent, r.task, r.seed): r for r in cells}
    rows = [score_row(r, by_cell.get((NULL, r.task, r.seed)), by_cell.get((REFERENCE, r.task, r.seed))) for r in cells]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for row in rows:
        groups[(row["agent"], row["task"])].append(row)
    aggregates = []
    for (agent, task), members in groups.items():
        agg: dict[str, Any] = {"agent": agent, "task": task, "seeds": [m["seed"] for m in members],
                               "ok": sum(1 for m in members if m["status"] == CellStatus.OK.value)}
        for key in ("abs_gain", "greedy_gain", "heldout_gain", "normalized"):
            values = [m[key] for m in members if m[key] is not None]
            agg[key] = across_seeds(values) if values else None
        agg["sampling_only"] = sum(1 for m in members if m.get("sampling_only"))
        aggregates.append(agg)
    return {"cells": rows, "aggregates": aggregates}


CSV_FIELDS = csv_keys(CELL_COLUMNS)  # every column of a cell's row (rlbench/scoring/columns.py)


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
