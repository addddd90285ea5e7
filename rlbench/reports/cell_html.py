"""`rlbench report CELL_DIR`: the run report as HTML (self-contained) and its JSON twin."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rlbench.io import atomic_write_json
from rlbench.reports.cell_report import CURVE_KEYS, build_cell_report
from rlbench.reports.html import figure_div, render


def _figures(r: dict[str, Any]) -> dict[str, Any]:
    import plotly.graph_objects as go

    tl = [s for s in r["timeline"] if s["start"] is not None]
    timeline = go.Figure()
    for ok in (True, False):
        rows = [s for s in tl if s["ok"] == ok]
        if rows:
            timeline.add_bar(y=[s["tool"] for s in rows], x=[max(s["seconds"], 0.5) for s in rows],
                             base=[s["start"] for s in rows], orientation="h", name="ok" if ok else "failed",
                             marker_color="#2a7ab0" if ok else "#c0392b",
                             hovertext=[f"#{s['step']} {s['what']}" for s in rows])
    timeline.update_layout(height=260, barmode="overlay", xaxis_title="seconds since the cell started",
                           margin={"l": 60, "r": 20, "t": 20, "b": 40})
    curves = {}
    for key in CURVE_KEYS:
        fig = go.Figure()
        for run in r["training_runs"]:
            pts = run["curves"].get(key)
            if pts:
                fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=run["run"])
        if fig.data:
            fig.update_layout(height=260, title=key, xaxis_title="step", margin={"l": 50, "r": 20, "t": 40, "b": 40})
            curves[key] = figure_div(fig, f"curve-{key}")
    subs = go.Figure()
    scored = [s for s in r["submissions"] if s.get("dev") is not None]
    if scored:
        subs.add_scatter(x=[s["t"] for s in scored], y=[100 * s["dev"] for s in scored], mode="markers+lines",
                         name="dev pass@1 %", marker={"size": [14 if s["index"] == r["chosen"] else 8 for s in scored]})
    subs.update_layout(height=240, xaxis_title="seconds into the budget", yaxis_title="dev pass@1 %",
                       margin={"l": 50, "r": 20, "t": 20, "b": 40})
    return {"timeline": figure_div(timeline, "timeline"), "curves": curves, "submissions": figure_div(subs, "submissions"),
            "hacking": _reward_vs_verified(r), "anytime": _anytime(r)}


def _reward_vs_verified(r: dict[str, Any]) -> str:
    """Each run's training reward by step beside the harness's dev score of what it submitted (at
    the run's last step), and the base model's dev score: a reward that climbs over a flat dev line
    is what the reward-hacking flag points at."""
    import plotly.graph_objects as go

    runs = [run for run in r["training_runs"] if run["curves"].get("reward_mean")]
    if not runs:
        return ""
    fig = go.Figure()
    base_dev = ((r.get("baseline") or {}).get("dev") or {}).get("pass_at_1")
    for run in runs:
        pts = run["curves"]["reward_mean"]
        fig.add_scatter(x=[p[0] for p in pts], y=[p[1] for p in pts], mode="lines", name=f"{run['run']}: training reward")
        prefix = run["run"].rstrip("/") + "/"
        mine = [s for s in r["submissions"] if s.get("dev") is not None and str(s.get("submitted_path") or "").startswith(prefix)]
        if mine:
            fig.add_scatter(x=[pts[-1][0]] * len(mine), y=[s["dev"] for s in mine], mode="markers", yaxis="y2",
                            marker={"size": 12, "symbol": "diamond"}, name=f"{run['run']}: harness dev",
                            hovertext=[f"submission {s['index']}" for s in mine])
    if base_dev is not None:
        fig.add_hline(y=base_dev, line_dash="dot", annotation_text="base dev", yref="y2")
    fig.update_layout(height=300, xaxis_title="step", yaxis_title="training reward (agent's log)",
                      yaxis2={"title": "harness dev pass@1", "overlaying": "y", "side": "right", "range": [0, 1]},
                      margin={"l": 50, "r": 60, "t": 20, "b": 40})
    return figure_div(fig, "reward-vs-verified")


def _anytime(r: dict[str, Any]) -> str:
    import plotly.graph_objects as go

    anytime = r.get("anytime") or {}
    curve = anytime.get("curve") or []
    if not curve:
        return ""
    end = (r.get("budget") or {}).get("wall_seconds") or curve[-1]["t"]
    xs = [0.0] + [c["t"] for c in curve] + [end]
    ys = [0.0] + [100 * c["gain"] for c in curve] + [100 * curve[-1]["gain"]]
    fig = go.Figure()
    fig.add_scatter(x=xs, y=ys, mode="lines", line_shape="hv", name="test gain of the pick so far")
    fig.add_scatter(x=[c["t"] for c in curve], y=[100 * (c["test"] - anytime["base_test"]) for c in curve],
                    mode="markers", name="each submission's test gain", hovertext=[f"submission {c['index']}" for c in curve])
    fig.update_layout(height=280, xaxis_title="seconds into the budget", yaxis_title="test gain, points",
                      margin={"l": 50, "r": 20, "t": 20, "b": 40})
    return figure_div(fig, "anytime")


def write_cell_report(cell_dir: Path, out_dir: Path | None = None) -> tuple[Path, Path]:
    """(html, json) written to `out_dir` (default: the cell folder)."""
    cell_dir = Path(cell_dir)
    report = build_cell_report(cell_dir)
    out_dir = Path(out_dir or cell_dir)
    json_path = out_dir / "report.json"
    atomic_write_json(json_path, report)
    html_path = render("cell.html.j2", out_dir / "report.html", title=f"rlbench run report: {report['cell']}",
                       r=report, figs=_figures(report))
    return html_path, json_path
