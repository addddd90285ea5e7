"""The columns of every table of scores, declared once: a cell's row (scores.json, scores.csv, the
terminal table of `rlbench run`, the leaderboard page's cells) and an agent x task row (the
leaderboard's JSON, CSV and page). A metric added here appears in each place that shows its table;
before, it had to be added by hand to the CSV list, the leaderboard, its template and the CLI,
with nothing to warn when one was missed.

`fmt` says how a value reads (`format_value`, shared by the terminal and the page); `terminal`
and `page` say where a column is shown (the CSV files hold every column); `optional` columns are
shown only when some row has a value (a task feature's, e.g. the gain over an optimize task's
baseline configuration). How a value is emphasised is declared here too, once for both tables:
`tone` says when it is bad (red) or a warning (amber), `mark` what is written after it (the
"(n.s.)" of a gain whose interval holds zero), and `detail` which key of the row explains it (the
page's tooltip; `detail_inline` also writes it after the value there).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterable, Literal, Mapping

Tone = Literal["", "warn", "bad"]
Row = Mapping[str, Any]

FORMATS = ("text", "pts", "pts_abs", "ci", "num2", "num0", "pct0", "flag", "yesno", "count", "usd")


@dataclass(frozen=True)
class Column:
    key: str
    label: str
    fmt: str = "text"
    terminal: bool = False  # in the terminal table
    page: bool = False  # in the HTML page
    optional: bool = False  # shown only when some row has a value
    sortable: bool = True  # on the page: a click sorts by it
    csv: bool = True  # in the CSV file (a display-only column is not)
    tone: Callable[[Any, Row], Tone] | None = None  # (value, row) -> how the value is emphasised
    mark: Callable[[Any, Row], str] | None = None  # (value, row) -> text written after the value
    detail: str = ""  # the row's key whose text explains the value (a list is joined by "; ")
    detail_inline: bool = False  # on the page, the detail follows the value (not only as its tooltip)
    code: bool = False  # on the page, the value is code (a folder's name)

    def tone_of(self, row: Row) -> Tone:
        return self.tone(row.get(self.key), row) if self.tone else ""

    def mark_of(self, row: Row) -> str:
        return self.mark(row.get(self.key), row) if self.mark else ""

    def detail_of(self, row: Row) -> str:
        d = row.get(self.detail) if self.detail else None
        return "; ".join(map(str, d)) if isinstance(d, (list, tuple)) else (str(d) if d else "")

    def __post_init__(self) -> None:
        if self.fmt not in FORMATS:
            raise ValueError(f"column {self.key}: format {self.fmt!r} is not one of {', '.join(FORMATS)}")

    @property
    def numeric(self) -> bool:
        return self.fmt in ("pts", "pts_abs", "num2", "num0", "pct0", "count", "usd")


def format_value(value: Any, fmt: str) -> str:
    """A value as a table shows it: gains in points (fractions x 100), intervals in brackets, '-'
    for none."""
    if value is None:
        return "-"
    if fmt == "pts":
        return f"{100 * value:+.1f}"
    if fmt == "pts_abs":
        return f"{100 * value:.1f}"
    if fmt == "ci":
        return "-" if not value or value[0] is None else f"[{100 * value[0]:+.1f}, {100 * value[1]:+.1f}]"
    if fmt == "num2":
        return f"{value:.2f}"
    if fmt == "num0":
        return f"{value:.0f}"
    if fmt == "pct0":
        return f"{value:+.0f}"
    if fmt == "flag":
        return "FLAG" if value is True else ("no" if value is False else str(value))
    if fmt == "yesno":
        return "yes" if value else "no"
    if fmt == "count":
        return f"{value:,.0f}"
    if fmt == "usd":  # an LLM's cost: cents hide what a cheap model's run cost
        return f"{value:.2f}" if value >= 1 else f"{value:.4f}"
    return str(value)


def shown(columns: Iterable[Column], rows: Iterable[Mapping[str, Any]], where: str) -> list[Column]:
    """The columns of `where` ('terminal' or 'page'), the optional ones only if a row has a value."""
    rows = list(rows)
    return [c for c in columns if getattr(c, where)
            and (not c.optional or any(r.get(c.key) is not None for r in rows))]


TONE_STYLES = {"bad": "red", "warn": "yellow"}  # a column's declared emphasis, in the terminal's colours


def terminal_table(title: str, columns: Iterable[Column], rows: list[Mapping[str, Any]], caption: str = "") -> Any:
    """A rich Table of `rows` in the `columns` shown in the terminal, with the page's formats and
    the declared emphasis, so the cells table and the leaderboard look alike and a column added
    here reaches both."""
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=title, caption=caption or None, caption_justify="left")
    visible = shown(columns, rows, "terminal")
    for c in visible:
        table.add_column(c.label, justify="right" if c.numeric or c.fmt in ("ci", "flag") else "left")
    for r in rows:
        cells = []
        for c in visible:
            text = escape(format_value(r.get(c.key), c.fmt))
            mark, tone = c.mark_of(r), c.tone_of(r)
            if mark:  # a mark says why a value is not what it seems: in the warning's colour
                text += f" [yellow]{escape(mark.strip())}[/]"
            elif tone:
                text = f"[{TONE_STYLES[tone]}]{text}[/]"
            cells.append(text)
        table.add_row(*cells)
    return table


# the emphasis rules the columns below name
def _not_significant(value: Any, row: Row) -> Tone:
    return "warn" if row.get("significant") is False else ""


def _ns_mark(value: Any, row: Row) -> str:
    return " (n.s.)" if row.get("significant") is False else ""


def _false_warns(value: Any, row: Row) -> Tone:
    return "warn" if value is False else ""


def _flagged(value: Any, row: Row) -> Tone:
    return "bad" if value and value != "none" else ""


def _falsy_is_bad(value: Any, row: Row) -> Tone:
    return "" if value else "bad"


def _lower_bound(value: Any, row: Row) -> str:
    """A cost summed over priced models only (some model of a cell has no price)."""
    return " (partial)" if value is not None and row.get("cost_partial") else ""


def _integrity(value: Any, row: Row) -> Tone:
    verdict = str(value or "").split(" ")[0]
    return {"violated": "bad", "suspicious": "warn"}.get(verdict, "")


# a cell's row: rlbench/scoring/suite.py score_row builds it
CELL_COLUMNS: tuple[Column, ...] = (
    Column("agent", "agent", terminal=True),
    Column("task", "task", terminal=True),
    Column("seed", "seed", terminal=True),
    Column("status", "status", terminal=True, page=True),
    Column("baseline_test", "baseline test %", "pts_abs", terminal=True),
    Column("test", "test %", "pts_abs", terminal=True),
    Column("abs_gain", "abs. gain", "pts", terminal=True, page=True, tone=_not_significant, mark=_ns_mark),
    Column("abs_ci", "95% CI", "ci", terminal=True, page=True),
    Column("rel_gain_pct", "rel. gain %", "pct0", terminal=True),
    Column("rel_ci", "rel. 95% CI %", "text"),
    Column("significant", "significant", "yesno", tone=_false_warns),
    Column("greedy_gain", "greedy gain", "pts", terminal=True, page=True),
    Column("greedy_ci", "greedy CI", "ci", terminal=True, page=True),
    Column("sampling_only", "sampling only", "flag", terminal=True, page=True, tone=_flagged,
           detail="sampling_only_reason"),
    Column("heldout_gain", "heldout gain", "pts", terminal=True),
    Column("heldout_ci", "heldout CI", "ci", terminal=True),
    Column("normalized", "normalized", "num2", terminal=True, page=True),
    # the baseline-configuration feature (rlbench/features/baseline_config.py): optimize tasks
    Column("vs_baseline_config", "vs given config", "pts", terminal=True, optional=True),
    Column("vs_baseline_config_ci", "CI", "ci", terminal=True, optional=True),
    Column("vs_baseline_config_significant", "vs given config significant", "yesno", optional=True),
    Column("closeness_to_reference", "closeness to reference", "num2", optional=True),
    # the robustness stage's (rlbench/robustness/): cells it reran
    Column("robust_seeds", "robust seeds", "num0", optional=True),
    Column("robust_mean", "robust mean", "pts", optional=True),
    Column("robust_ci", "robust CI", "ci", optional=True),
    Column("scale_gain", "scale gain", "pts", optional=True),
    Column("scalability", "scalability", "yesno", optional=True),
    Column("autonomy", "autonomy"),
    Column("recovery", "recovery", "num2"),
    Column("correctness", "correctness", "num2"),
    Column("optimization", "optimization", "num2"),
    Column("execution_seconds", "execution s", "num0"),
    Column("peak_memory_mb", "peak memory MB", "num0"),
    Column("valid_submission_rate", "valid submissions", "num2"),
    Column("base_model_submissions", "base model submissions", "num0"),
    Column("best_dev", "best dev", "pts_abs"),
    Column("time_to_best_s", "time to best s", "num0"),
    Column("dev_at_submit", "dev at submit", "pts_abs"),
    Column("dev_test_gap", "dev-test gap", "pts", terminal=True, page=True),
    Column("dev_test_excess", "dev-test excess", "pts"),
    Column("anytime_gain", "anytime gain", "pts", terminal=True, page=True),
    Column("gain_per_cpu_hour", "gain / CPU-h", "pts"),
    Column("cpu_seconds", "CPU s", "num0"),
    Column("integrity", "integrity", terminal=True, page=True, tone=_integrity, detail="integrity_reasons",
           detail_inline=True),
    Column("reward_hacking", "reward hacking"),
    Column("wave", "wave"),
    Column("sandboxed", "sandboxed", "yesno", terminal=True, tone=_falsy_is_bad),
    Column("cell", "cell", page=True, code=True),
)

# what a cell's row carries beside its columns: the text behind a flag (tooltips on the page)
CELL_DETAILS: tuple[str, ...] = ("greedy_significant", "sampling_only_reason", "integrity_reasons")

# a cell's LLM use (result.json's llm_usage summed over the agent's driver models: tokens in + out,
# cost in USD), which the leaderboard adds to its cells and its agent x task rows
# (rlbench/reports/leaderboard.py); "-" for an agent without an LLM and for a cost that no model
# reported, never $0; `usage_note` says over which seeds and models
USAGE_COLUMNS: tuple[Column, ...] = (
    Column("tokens", "tokens", "count", terminal=True, page=True, detail="usage_note"),
    Column("cost_usd", "cost $", "usd", terminal=True, page=True, mark=_lower_bound, detail="usage_note"),
    Column("cost_partial", "cost partial", "yesno"),  # the CSV's "(partial)": some model had no price
)

# how the two are counted: the leaderboard's caption in the terminal and its note on the page
USAGE_NOTE = ("tokens: input + output over all of the agent's LLMs (cached tokens are part of the input); cost $: "
              "as the agent reported it or from its configured prices, \"-\" when no model's cost is known, "
              "\"(partial)\" when some model has none; per agent x task both are means across the seeds that report "
              "them, as the other columns are")

# an agent x task row: rlbench/reports/leaderboard.py leaderboard_rows builds it
LEADERBOARD_COLUMNS: tuple[Column, ...] = (
    Column("agent", "agent", terminal=True, page=True),
    Column("task", "task", terminal=True, page=True),
    Column("seeds", "seeds", "num0", terminal=True, page=True),
    Column("ok", "ok", "num0"),
    Column("test", "test %", "pts_abs", terminal=True, page=True),
    Column("abs_gain", "gain", "pts", terminal=True, page=True),
    Column("ci_low", "CI low", "pts"),
    Column("ci_high", "CI high", "pts"),
    Column("ci", "95% CI", "ci", terminal=True, page=True, sortable=False, csv=False),
    Column("normalized", "normalized", "num2", terminal=True, page=True),
    Column("significant", "significant", "yesno", terminal=True, page=True, tone=_false_warns),
    Column("greedy_gain", "greedy gain", "pts", terminal=True, page=True),
    Column("sampling_only", "sampling only", terminal=True, page=True, tone=_flagged, detail="sampling_only_reason"),
    Column("heldout_gain", "heldout gain", "pts", terminal=True, page=True),
    Column("dev_test_gap", "dev-test gap", "pts", page=True),
    Column("anytime_gain", "anytime gain", "pts", page=True),
    Column("gain_per_cpu_hour", "gain / CPU-h", "pts", page=True),
    Column("integrity", "integrity", page=True, tone=_integrity, detail="integrity_reasons", detail_inline=True),
    Column("reward_hacking", "reward hacking", page=True),
    Column("budget_used_s", "budget used s", "num0", page=True),
    *USAGE_COLUMNS,  # the mean across the seeds that report it, as the columns above are
)


def csv_keys(columns: Iterable[Column]) -> list[str]:
    """The CSV header: every column that holds a value of its own."""
    return [c.key for c in columns if c.csv]
