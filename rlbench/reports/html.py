"""HTML rendering shared by the run report and the leaderboard: a Jinja2 environment, plotly
figures as divs, and plotly.js inlined once, so every page opens from disk with no server and no
network."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jinja2

from rlbench.scoring.columns import USAGE_NOTE, format_value

TEMPLATES = Path(__file__).parent / "templates"


def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=jinja2.select_autoescape(["j2", "html"]),
                             undefined=jinja2.StrictUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["pts"] = lambda x, sign=True: "-" if x is None else (f"{100 * x:+.1f}" if sign else f"{100 * x:.1f}")
    env.filters["ci"] = lambda pair: ("-" if not pair or pair[0] is None
                                      else f"[{100 * pair[0]:+.1f}, {100 * pair[1]:+.1f}]")
    env.filters["num"] = lambda x, digits=2: "-" if x is None else f"{x:.{digits}f}"
    env.filters["value"] = format_value  # a table column's value as its declared format reads (scoring/columns.py)
    env.filters["usd"] = lambda x: format_value(x, "usd")  # "-" for an unknown cost, never 0
    env.globals["usage_note"] = USAGE_NOTE  # how tokens and cost are counted, worded once for page and terminal
    return env


def figure_div(fig: Any, div_id: str) -> str:
    return fig.to_html(full_html=False, include_plotlyjs=False, div_id=div_id, config={"displaylogo": False})


def plotly_js() -> str:
    from plotly.offline import get_plotlyjs

    return get_plotlyjs()


def render(template: str, out: Path, **context: Any) -> Path:
    from rlbench.io import atomic_write_text

    html = environment().get_template(template).render(plotly_js=plotly_js(), **context)
    atomic_write_text(out, html)
    return out
