"""`rlbench leaderboard SUITE_DIR`: agents x tasks with score, gain, 95% interval, normalized score
and significance, the greedy gain beside the sampled one and the cells whose sampled gain came with
no greedy gain (sharper sampling, not RL), and what an LLM agent's models cost (tokens in + out and
USD, from each cell's `llm_usage`), as HTML (sortable, filterable, with plots), CSV, JSON and a
terminal table."""

from __future__ import annotations

import csv
import io
from collections import defaultdict
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError
from rlbench.io import atomic_write_json, atomic_write_text, read_json
from rlbench.reports.cell_report import model_usage, usage_total
from rlbench.reports.html import figure_div, render
from rlbench.results import CellResult, CellStatus, Gain
from rlbench.scoring.columns import (CELL_COLUMNS, LEADERBOARD_COLUMNS, USAGE_COLUMNS, USAGE_NOTE, csv_keys,
                                     shown)
from rlbench.scoring.columns import terminal_table as columns_table
from rlbench.scoring.seeds import across_seeds
from rlbench.scoring.suite import score_suite

COLUMNS = csv_keys(LEADERBOARD_COLUMNS)  # the CSV's header (rlbench/scoring/columns.py)
SEVERITY = ("clean", "suspicious", "violated")


def _worst(members: list[dict[str, Any]]) -> str | None:
    """The worst integrity verdict of an agent x task's cells, with how many cells have it."""
    verdicts = [m["integrity"] for m in members if m.get("integrity") in SEVERITY]
    if not verdicts:
        return None
    worst = max(verdicts, key=SEVERITY.index)
    return worst if worst == "clean" else f"{worst} ({verdicts.count(worst)}/{len(members)})"


def _test_gain(members: list[dict[str, Any]]) -> Gain | None:
    """An agent x task's test gain from its cells' score rows: over several seeds the mean with
    the Student-t interval across seeds; for one seed that cell's paired bootstrap gain."""
    scored = [m for m in members if m["abs_gain"] is not None]
    if len(scored) >= 2:
        agg = across_seeds([m["abs_gain"] for m in scored])
        return Gain.of_interval(agg["mean"], agg["ci_low"], agg["ci_high"])
    if scored:
        m = scored[0]
        return Gain(abs=m["abs_gain"], ci_low=m["abs_ci"][0], ci_high=m["abs_ci"][1], significant=m["significant"])
    return None


def cell_usage(llm_usage: Any) -> dict[str, Any]:
    """A cell's tokens and cost over all its models, for its leaderboard row: None for a cell
    without LLM use (null and reference agents) and for a cost no model reported, so neither reads
    as 0; `cost_partial` when only some models have a price (the cost is then a lower bound)."""
    total = usage_total(model_usage(llm_usage))
    cost = total["cost_usd"]
    note = f"no price for {', '.join(total['unpriced'])}" if total["unpriced"] else ""
    return {"tokens": total["tokens"], "cost_usd": cost, "cost_partial": None if cost is None else bool(total["unpriced"]),
            "usage_note": note}


def _mean_usage(members: list[dict[str, Any]]) -> dict[str, Any]:
    """An agent x task's tokens and cost: the means across the seeds that report them, as every
    other column of the row is a mean across seeds; the note says how many seeds that is, and why
    a cost is missing or partial."""
    out: dict[str, Any] = {}
    notes = []
    for key, name in (("tokens", "tokens"), ("cost_usd", "cost")):
        values = [m[key] for m in members if m.get(key) is not None]
        out[key] = sum(values) / len(values) if values else None
        if values:
            notes.append(f"{name}: mean of {len(values)}/{len(members)} seeds")
    if out["cost_usd"] is not None:
        out["cost_usd"] = round(out["cost_usd"], 6)
    out["cost_partial"] = None if out["cost_usd"] is None else any(m.get("cost_partial") for m in members)
    if out["tokens"] is not None and out["cost_usd"] is None:
        notes.append("no model reported a cost")
    if out["cost_partial"]:
        notes.append("some model has no price: a lower bound")
    unpriced = sorted({m["usage_note"] for m in members if m.get("usage_note")})
    out["usage_note"] = "; ".join(notes + unpriced)
    return out


def leaderboard_rows(suite_dir: Path) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """(one row per agent x task, the per-cell scores). Over several seeds the interval is the
    Student-t one across seeds; for one seed it is that cell's paired bootstrap interval."""
    suite_dir = Path(suite_dir)
    if not (suite_dir / "results.json").is_file():
        raise ConfigError(f"{suite_dir} is not a finished suite folder (no results.json)")
    results = [CellResult.from_dict(r) for r in read_json(suite_dir / "results.json")]
    scores = read_json(suite_dir / "scores.json") if (suite_dir / "scores.json").is_file() else score_suite(results)
    used = {r.cell: (r.budget or {}).get("used_seconds") for r in results}
    usage = {r.cell: cell_usage(r.llm_usage) for r in results}
    cells = [{**c, "budget_used_s": used.get(c["cell"]), **usage.get(c["cell"], cell_usage(None))}
             for c in scores["cells"]]
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for c in cells:
        groups[(c["agent"], c["task"])].append(c)
    rows = []
    for (agent, task), members in groups.items():
        row: dict[str, Any] = {"agent": agent, "task": task, "seeds": len(members),
                               "ok": sum(1 for m in members if m["status"] == CellStatus.OK.value)}
        g = _test_gain(members)
        row.update(abs_gain=g.abs if g else None, ci_low=g.ci_low if g else None, ci_high=g.ci_high if g else None,
                   ci=[g.ci_low, g.ci_high] if g else None, significant=g.significant if g else None)
        for key in ("test", "greedy_gain", "normalized", "heldout_gain", "budget_used_s", "dev_test_gap", "anytime_gain",
                    "gain_per_cpu_hour"):
            values = [m[key] for m in members if m.get(key) is not None]
            row[key] = sum(values) / len(values) if values else None
        row["integrity"] = _worst(members)
        flags = [m for m in members if m.get("reward_hacking")]
        row["reward_hacking"] = f"{len(flags)}/{len(members)}" if flags else ("none" if members else None)
        sampled_only = [m for m in members if m.get("sampling_only")]
        row["sampling_only"] = f"{len(sampled_only)}/{len(members)}" if sampled_only else ("none" if members else None)
        row.update(_mean_usage(members))
        rows.append(row)
    rows.sort(key=lambda r: (r["task"], -(r["abs_gain"] if r["abs_gain"] is not None else -1e9)))
    return rows, cells


def _csv_value(key: str, value: Any) -> Any:
    """Fractions to 4 places; a cost to 6 (a cheap model's run costs less than a hundredth of a
    cent); a mean of token counts to 1; no value stays empty."""
    if isinstance(value, float):
        return f"{value:.6f}" if key == "cost_usd" else f"{value:.1f}" if key == "tokens" else f"{value:.4f}"
    return value


def _csv(rows: list[dict[str, Any]]) -> str:
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=list(COLUMNS), extrasaction="ignore")
    w.writeheader()
    for r in rows:
        w.writerow({k: _csv_value(k, v) for k, v in r.items()})
    return buf.getvalue()


def terminal_table(rows: list[dict[str, Any]], suite: str) -> Any:
    """The leaderboard's rows in the terminal, in its declared columns; the caption says how
    tokens and cost are counted and averaged."""
    return columns_table(f"leaderboard {suite} (test gains in points; 95% CI: t across seeds, or bootstrap)",
                         LEADERBOARD_COLUMNS, rows, USAGE_NOTE)


def _figures(rows: list[dict[str, Any]], cells: list[dict[str, Any]]) -> dict[str, str]:
    import plotly.graph_objects as go

    gains = go.Figure()
    for agent in sorted({r["agent"] for r in rows}):
        mine = [r for r in rows if r["agent"] == agent and r["abs_gain"] is not None]
        gains.add_bar(name=agent, x=[r["task"] for r in mine], y=[100 * r["abs_gain"] for r in mine],
                      error_y={"type": "data", "symmetric": False,
                               "array": [100 * (r["ci_high"] - r["abs_gain"]) for r in mine],
                               "arrayminus": [100 * (r["abs_gain"] - r["ci_low"]) for r in mine]})
    gains.update_layout(barmode="group", height=320, yaxis_title="test gain, points (95% CI)", margin={"t": 20})
    norm = go.Figure()
    scored = [r for r in rows if r["normalized"] is not None]
    norm.add_bar(x=[f"{r['agent']} / {r['task']}" for r in scored], y=[r["normalized"] for r in scored])
    if not scored:
        norm.add_annotation(text="no normalized scores: the suite needs null and reference cells on the same task and seed",
                            showarrow=False, x=0.5, y=0.5, xref="paper", yref="paper")
    norm.update_layout(height=280, yaxis_title="normalized score (null 0, reference 1)", margin={"t": 20})
    budget = go.Figure()
    for agent in sorted({c["agent"] for c in cells}):
        mine = [c for c in cells if c["agent"] == agent and c["abs_gain"] is not None and c["budget_used_s"] is not None]
        budget.add_scatter(x=[c["budget_used_s"] for c in mine], y=[100 * c["abs_gain"] for c in mine], mode="markers",
                           name=agent, hovertext=[c["cell"] for c in mine])
    budget.update_layout(height=300, xaxis_title="budget used, s", yaxis_title="test gain, points", margin={"t": 20})
    return {"gains": figure_div(gains, "plot-gains"), "normalized": figure_div(norm, "plot-normalized"),
            "budget": figure_div(budget, "plot-budget")}


def write_leaderboard(suite_dir: Path, out_dir: Path | None = None) -> dict[str, Path]:
    suite_dir = Path(suite_dir)
    rows, cells = leaderboard_rows(suite_dir)
    out_dir = Path(out_dir or suite_dir)
    paths = {"json": out_dir / "leaderboard.json", "csv": out_dir / "leaderboard.csv", "html": out_dir / "leaderboard.html"}
    atomic_write_json(paths["json"], {"suite": suite_dir.name, "rows": rows, "cells": cells})
    atomic_write_text(paths["csv"], _csv(rows))
    render("leaderboard.html.j2", paths["html"], title=f"rlbench leaderboard: {suite_dir.name}", suite=suite_dir.name,
           rows=rows, cells=cells, figs=_figures(rows, cells), columns=shown(LEADERBOARD_COLUMNS, rows, "page"),
           cell_columns=shown(CELL_COLUMNS, cells, "page") + shown(USAGE_COLUMNS, cells, "page"))
    return paths
