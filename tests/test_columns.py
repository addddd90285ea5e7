"""Every table of scores reads its columns from rlbench/scoring/columns.py: a metric declared
there reaches scores.csv, the leaderboard's CSV and page, and the terminal table, and a row
carries no value that no column declares."""

from __future__ import annotations

import csv
import io

from rlbench.results import CellResult
from rlbench.scoring.columns import CELL_COLUMNS, CELL_DETAILS, LEADERBOARD_COLUMNS, Column, csv_keys, format_value, shown
from rlbench.scoring.suite import score_row, scores_csv

GAIN = {"abs": 0.1, "ci_low": 0.05, "ci_high": 0.15, "significant": True, "rel_pct": 50.0, "rel_ci_low": 20.0,
        "rel_ci_high": 80.0, "win_rate": 0.6, "greedy": {"abs": 0.08, "ci_low": 0.02, "ci_high": 0.14, "significant": True}}


def _cell(**extra) -> CellResult:
    return CellResult.from_dict({"cell": "c", "agent": "a", "task": "t", "seed": 0, "status": "ok", "sandboxed": True,
                                 "baseline": {"test": {"pass_at_1": 0.2}}, "scores": {"test": {"pass_at_1": 0.3}},
                                 "gains": {"test": GAIN, "heldout": GAIN}, "capabilities": {"best_dev": 0.3},
                                 "integrity": {"verdict": "clean", "reasons": []}, **extra})


def test_a_cells_row_holds_exactly_the_declared_columns():
    plain = score_row(_cell(), None, None)
    optimize = score_row(_cell(vs_baseline_config={"gains": {"test": GAIN}}), None, None)
    declared = {c.key for c in CELL_COLUMNS}
    for row in (plain, optimize):
        assert set(row) - set(CELL_DETAILS) <= declared, set(row) - declared
    always = {c.key for c in CELL_COLUMNS if not c.optional}
    assert always <= set(plain), always - set(plain)
    assert {"vs_baseline_config", "vs_baseline_config_ci"} <= set(optimize)
    header = next(csv.reader(io.StringIO(scores_csv({"cells": [plain]}))))
    assert header == csv_keys(CELL_COLUMNS)


def test_optional_columns_show_only_where_a_row_has_them():
    plain = score_row(_cell(), None, None)
    optimize = score_row(_cell(vs_baseline_config={"gains": {"test": GAIN}}), None, None)
    keys = lambda rows: [c.key for c in shown(CELL_COLUMNS, rows, "terminal")]  # noqa: E731
    assert "vs_baseline_config" not in keys([plain]) and "vs_baseline_config" in keys([plain, optimize])


def test_the_cli_table_and_the_leaderboard_page_use_the_declared_labels(tmp_path):
    from rich.console import Console

    from rlbench.cli import _cells_table
    from rlbench.reports.html import environment

    row = score_row(_cell(), None, None)
    console = Console(width=400, record=True)
    console.print(_cells_table([row]))
    text = console.export_text()
    for c in shown(CELL_COLUMNS, [row], "terminal"):
        assert c.label in text, c.label
    board = {"agent": "a", "task": "t", "seeds": 1, "ok": 1, "test": 0.3, "abs_gain": 0.1, "ci_low": 0.05,
             "ci_high": 0.15, "ci": [0.05, 0.15], "significant": True, "normalized": None, "greedy_gain": 0.08,
             "sampling_only": "none", "heldout_gain": 0.1, "dev_test_gap": None, "anytime_gain": None,
             "gain_per_cpu_hour": None, "integrity": "clean", "reward_hacking": "none", "budget_used_s": 12.0}
    html = environment().get_template("leaderboard.html.j2").render(
        title="t", suite="s", rows=[board], cells=[row], figs={"gains": "", "normalized": "", "budget": ""},
        columns=shown(LEADERBOARD_COLUMNS, [board], "page"), cell_columns=shown(CELL_COLUMNS, [row], "page"),
        plotly_js="")
    for c in shown(LEADERBOARD_COLUMNS, [board], "page") + shown(CELL_COLUMNS, [row], "page"):
        assert f">{c.label}</th>" in html, c.label
    assert "[+5.0, +15.0]" in html and "+10.0" in html


def test_formats():
    assert format_value(None, "pts") == "-" and format_value(0.123, "pts") == "+12.3"
    assert format_value([0.01, 0.2], "ci") == "[+1.0, +20.0]" and format_value(True, "flag") == "FLAG"
    try:
        Column("x", "x", "percent")
    except ValueError as exc:
        assert "percent" in str(exc)
    else:
        raise AssertionError("an unknown format is refused")


def test_emphasis_is_declared_once_and_shown_alike_in_the_terminal_and_on_the_page():
    """A gain whose interval holds zero, a sampling-only flag, a violated integrity verdict and an
    unsandboxed cell: the same column declaration marks each in the terminal (colour) and on the
    page (class, tooltip)."""
    from rich.console import Console

    from rlbench.cli import _cells_table
    from rlbench.reports.html import environment

    weak = {**GAIN, "significant": False, "ci_low": -0.02}
    row = score_row(_cell(gains={"test": weak, "heldout": GAIN}, sandboxed=False,
                          integrity={"verdict": "violated", "reasons": ["decoy opened"]}), None, None)
    by_key = {c.key: c for c in CELL_COLUMNS}
    assert by_key["abs_gain"].tone_of(row) == "warn" and by_key["abs_gain"].mark_of(row) == " (n.s.)"
    assert by_key["integrity"].tone_of(row) == "bad" and by_key["integrity"].detail_of(row) == "decoy opened"
    assert by_key["sandboxed"].tone_of(row) == "bad"
    assert by_key["abs_gain"].tone_of(score_row(_cell(), None, None)) == ""

    console = Console(width=400, record=True)
    console.print(_cells_table([row]))
    terminal = console.export_text(styles=True, clear=False)
    assert "(n.s.)" in console.export_text()
    assert "\x1b[31m" in terminal  # red: the violated verdict and the unsandboxed cell

    html = environment().get_template("leaderboard.html.j2").render(
        title="t", suite="s", rows=[], cells=[row], figs={"gains": "", "normalized": "", "budget": ""},
        columns=[], cell_columns=shown(CELL_COLUMNS, [row], "page"), plotly_js="")
    assert '<td class="l tone-bad" title="decoy opened">violated: decoy opened</td>' in html
    assert 'class="tone-warn" data-v="0.1">+10.0 (n.s.)</td>' in html
    assert "<code>c</code>" in html
