"""`rlbench tasks validate NAME`: a task proves that it discriminates before it joins the suite.

It runs the null agent (the base model, unchanged) and the reference agent on several seeds as one
suite, and passes only when (1) every null cell's test gain interval contains zero, (2) the
reference agent's test gain interval lies above zero on at least two seeds of three (the same
share of other counts), and the task's own constraint holds on those seeds, and (3) every cell,
scoring included, finished within `max_cell_s` (20 minutes on 2 cores by default). The verdict and
the numbers behind it go to `tasks/NAME/validation.json`, from which `tasks/README.md`'s table is
written (`rlbench tasks table --write`).
"""

from __future__ import annotations

import math
import os
import platform
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.config.core import check
from rlbench.io import atomic_write_json, read_json, utc_now
from rlbench.paths import tasks_root
from rlbench.results import CellResult, Gain

VALIDATION_FILE = "validation.json"


@dataclass
class ValidationConfig:
    seeds: int = 3
    max_cell_s: float = 1200.0  # a cell of either agent, from start to scored result
    sandbox: str = "bwrap"
    results: str = ""  # where the validation suite goes; empty: $RLBENCH_RESULTS or ./results
    write: bool = True  # write tasks/NAME/validation.json

    def validate(self) -> None:
        check(self.seeds >= 1, "seeds", self.seeds, ">= 1")
        check(self.max_cell_s > 0, "max_cell_s", self.max_cell_s, "> 0")


def _commit() -> str:
    """The checkout's commit, `+dirty` when tracked files under rlbench/, reference_pipelines/ or
    tasks/ (validation records and the table aside) differ from it: a record made with uncommitted
    code says so."""
    here = Path(__file__).resolve().parent
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=10,
                              cwd=here).stdout.strip()
        changed = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no", "--", "rlbench",
                                  "reference_pipelines", "tasks", ":(exclude)tasks/*/validation.json",
                                  ":(exclude)tasks/README.md"], capture_output=True, text=True, timeout=30,
                                 cwd=here.parent.parent).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return ""
    return f"{head}+dirty" if head and changed else head


def _cell_row(result: CellResult | dict[str, Any]) -> dict[str, Any]:
    """What a validation record keeps of one cell: its gains, and its task's own figures."""
    r = CellResult.coerce(result)
    test, held = r.gain("test"), r.gain("heldout")
    row: dict[str, Any] = {
        "agent": r.agent, "seed": r.seed, "status": r.status.value, "reason": r.reason[:300],
        "cell_seconds": r.cell_seconds, "cell": r.cell,
        "base_test": ((r.baseline or {}).get("test") or {}).get("pass_at_1"),
        "base_weights": (r.base_model or {}).get("weights_hash"),
        "test_score": ((r.scores or {}).get("test") or {}).get("pass_at_1"),
        "test_gain": test.abs if test else None, "test_ci": test.ci if test else None,
        "heldout_gain": held.abs if held else None, "heldout_ci": held.ci if held else None,
        "win_rate": test.win_rate if test else None,
        # greedy decoding's gain on the same items, paired the same way: beside the sampled one, it
        # tells a policy that got sharper from one that got better
        "greedy_gain": test.greedy.abs if test and test.greedy else None,
        "greedy_ci": test.greedy.ci if test and test.greedy else None,
        "splits": r.splits,  # seed source and fingerprints the cell was scored on
    }
    if r.vs_baseline_config:
        v = Gain.from_dict(r.vs_baseline_config["gains"]["test"])
        row["vs_baseline_config"] = {"gain": v.abs, "ci": v.ci}
    if r.constraint:
        c = r.constraint
        row["constraint"] = {k: c[k] for k in ("max_kl", "kl", "ci_low", "ci_high", "satisfied", "constrained_gain")}
    if r.claim:
        row["claim"] = {k: r.claim.get(k) for k in ("made", "claimed", "claimed_ci", "abs_error", "covered")}
    if r.reward_queries:
        row["reward_queries"] = r.reward_queries
    if r.debug:
        row["debug"] = {k: r.debug.get(k) for k in ("bug", "named", "diagnosed", "snippet_removed",
                                                    "recipe_uses_pipeline")}
    return row


def judge(rows: list[dict[str, Any]], seeds: int, max_cell_s: float) -> dict[str, Any]:
    """The three checks on the cells' rows; `passed` only when all hold."""
    null = [r for r in rows if r["agent"] == "null"]
    ref = [r for r in rows if r["agent"] == "reference"]

    def zero_inside(r: dict[str, Any]) -> bool:
        return r["status"] == "ok" and r["test_ci"] is not None and r["test_ci"][0] <= 0 <= r["test_ci"][1]

    def above_zero(r: dict[str, Any]) -> bool:
        ok = r["status"] == "ok" and r["test_ci"] is not None and r["test_ci"][0] > 0
        return ok and (r.get("constraint") or {}).get("satisfied", True)

    need = math.ceil(2 * seeds / 3)
    positive = sum(above_zero(r) for r in ref)
    slow = [r["cell"] for r in rows if (r.get("cell_seconds") or 0) > max_cell_s]
    checks = {
        "null_indistinguishable_from_zero": {"ok": len(null) == seeds and all(zero_inside(r) for r in null),
                                             "seeds": [r["seed"] for r in null if zero_inside(r)]},
        "reference_above_zero": {"ok": len(ref) == seeds and positive >= need, "seeds_above": positive, "needed": need},
        "fits_budget": {"ok": not slow, "max_cell_s": max_cell_s, "over": slow,
                        "longest_s": max((r.get("cell_seconds") or 0 for r in rows), default=0)},
    }
    return {"checks": checks, "passed": all(c["ok"] for c in checks.values())}


def validate_task(name: str, cfg: ValidationConfig | None = None) -> dict[str, Any]:
    """Run the validation suite of task `name` and return (and by default write) its verdict."""
    from rlbench.orchestration.suite import load_run_spec, run_suite
    from rlbench.tasks.registry import load_task, task_file

    cfg = cfg or ValidationConfig()
    cfg.validate()
    task = load_task(name)
    suite = f"validate-{name}-{time.strftime('%Y%m%d-%H%M%S')}"
    overrides = ["agents=[null,reference]", f"tasks=[{name}]", f"seeds=[{','.join(str(s) for s in range(cfg.seeds))}]",
                 f"suite={suite}", f"sandbox={cfg.sandbox}", "reports=false", "robustness.seeds=0",
                 "robustness.scale=false"]
    if cfg.results:
        overrides.append(f"results={cfg.results}")
    spec = load_run_spec(overrides)
    t0 = time.monotonic()
    # the base's scores on this installation's splits, once, before any cell: otherwise the first
    # cell pays for them (minutes where each completion runs in a sandbox, list-program: ~13 min),
    # and the cell-time check would judge a fresh installation's one-time cost, not the task
    from rlbench.evaluation.baseline import baseline

    base_scoring_s = time.monotonic()
    baseline(task, device=spec.device, engine=spec.score_engine)
    base_scoring_s = time.monotonic() - base_scoring_s
    suite_dir, results = run_suite(spec)
    rows = [_cell_row(r) for r in results]
    verdict = judge(rows, cfg.seeds, cfg.max_cell_s)
    record = {
        "task": task.name, "version": task.version, "category": task.category.value, "kind": task.kind.value,
        "difficulty": task.difficulty.value, "metric": task.metric.value, "reward_access": task.reward.access.value,
        "budget_s": task.budget.wall_seconds, "validated": utc_now(), "commit": _commit(),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "command": f"rlbench tasks validate {name} seeds={cfg.seeds}", "suite": str(suite_dir),
        "seconds": round(time.monotonic() - t0, 1), "base_scoring_s": round(base_scoring_s, 1), **verdict,
        "cells": rows,
        # which build of the base the numbers are about: a zoo build is exact for its machine only
        "base_model": {"name": task.model.base,
                       "weights_hashes": sorted({r["base_weights"] for r in rows if r.get("base_weights")})},
        # which splits: secret ones are this installation's own, public ones the task file's seed
        "splits": next((r["splits"] for r in rows if r.get("splits")), None),
    }
    if cfg.write:
        atomic_write_json(task_file(name, VALIDATION_FILE), record)  # a variant's beside its variant file
    return record


def load_validations() -> dict[str, dict[str, Any]]:
    """Every task's stored validation, by task name (tasks never validated are absent)."""
    root = tasks_root()
    out = {}
    for path in sorted(root.glob(f"*/{VALIDATION_FILE}")):
        out[path.parent.name] = read_json(path)
    return out


def _pts(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:+.1f}"


def _mean(xs: list[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def table_markdown(tasks: list[Any], validations: dict[str, dict[str, Any]]) -> str:
    """The baselines-and-reference-gains table of tasks/README.md."""
    lines = ["| task | category | kind | difficulty | budget | rewards | base test | null gain (test) | "
             "reference gain (test), per seed [95% CI] | reference greedy gain (test, mean) | "
             "reference heldout gain (mean) | task's own score | longest cell | validation |",
             "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for t in tasks:
        v = validations.get(t.name)
        head = (f"| `{t.name}` | {t.category.value} | {t.kind.value} | {t.difficulty.value} | "
                f"{t.budget.wall_seconds // 60} min | {t.reward.access.value} | ")
        if not v or v.get("version") != t.version:
            lines.append(head + "- | - | - | - | - | - | - | not validated |")
            continue
        null = [r for r in v["cells"] if r["agent"] == "null"]
        ref = [r for r in v["cells"] if r["agent"] == "reference"]
        base = _mean([r.get("base_test") for r in v["cells"]])
        null_txt = ", ".join(_pts(r["test_gain"]) for r in null)
        ref_txt = "; ".join(f"{_pts(r['test_gain'])} [{_pts(r['test_ci'][0])}, {_pts(r['test_ci'][1])}]"
                            if r.get("test_ci") else r["status"] for r in ref)
        own = _own_score(ref)
        verdict = "passed" if v["passed"] else "failed: " + ", ".join(k for k, c in v["checks"].items() if not c["ok"])
        lines.append(head + f"{'-' if base is None else f'{100 * base:.1f}'} | {null_txt} | {ref_txt} | "
                     f"{_pts(_mean([r.get('greedy_gain') for r in ref]))} | "  # '-' in records made before it was kept
                     f"{_pts(_mean([r.get('heldout_gain') for r in ref]))} | {own} | "
                     f"{v['checks']['fits_budget']['longest_s']:.0f} s | {verdict} ({v['validated'][:10]}, {v['commit']}"
                     f"{_base_build(v)}) |")
    return "\n".join(lines)


def _base_build(v: dict[str, Any]) -> str:
    """`; base NAME HASH`: the build of the base model the row measured (records made before it was
    kept have none)."""
    b = v.get("base_model") or {}
    return f"; base {b['name']} {', '.join(h[:8] for h in b['weights_hashes'])}" if b.get("weights_hashes") else ""


def _own_score(ref: list[dict[str, Any]]) -> str:
    """What the task scores beyond the gain over the base, averaged over the reference seeds."""
    if any("vs_baseline_config" in r for r in ref):
        return "vs given config " + _pts(_mean([(r.get("vs_baseline_config") or {}).get("gain") for r in ref]))
    if any("constraint" in r for r in ref):
        kls = [r["constraint"]["kl"] for r in ref if r.get("constraint")]
        held = sum(1 for r in ref if (r.get("constraint") or {}).get("satisfied"))
        return f"KL {_mean(kls):.2f} (limit {ref[0]['constraint']['max_kl']}), held {held}/{len(ref)}"
    if any("claim" in r for r in ref):
        claims = [r["claim"] for r in ref if (r.get("claim") or {}).get("made")]
        if not claims:
            return "no claims"
        return (f"claim error {_mean([c['abs_error'] for c in claims]) * 100:.1f} pts, covered "
                f"{sum(bool(c['covered']) for c in claims)}/{len(claims)}")
    if any("debug" in r for r in ref):
        dbg = [r["debug"] for r in ref if r.get("debug")]
        return (f"diagnosed {sum(bool(d['diagnosed']) for d in dbg)}/{len(dbg)}, fixed "
                f"{sum(bool(d['snippet_removed']) for d in dbg)}/{len(dbg)} ({', '.join(d['bug'] for d in dbg)})")
    if any(r.get("win_rate") is not None for r in ref) and any(r.get("reward_queries") is None for r in ref):
        return "win rate " + f"{100 * _mean([r.get('win_rate') for r in ref]):.0f}%"
    return "-"


BEGIN, END = "<!-- validation table: begin (rlbench tasks table --write) -->", "<!-- validation table: end -->"


def write_readme_table(readme: Path, table: str) -> None:
    """Replace the table between the markers of tasks/README.md (the prose around it stays)."""
    text = readme.read_text() if readme.is_file() else ""
    if BEGIN in text and END in text:
        head, rest = text.split(BEGIN, 1)
        tail = rest.split(END, 1)[1]
        text = f"{head}{BEGIN}\n{table}\n{END}{tail}"
    else:
        text = f"{text.rstrip()}\n\n{BEGIN}\n{table}\n{END}\n".lstrip()
    readme.write_text(text)
