"""The run report of one cell: what the agent did, what it trained, what it submitted, and why the
cell ended as it did. Built only from harness records (result, trajectory, submissions, the code
snapshots) and the step logs the training runs left in the workspace."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
from pathlib import Path
from typing import Any

from rlbench import safefs
from rlbench.record import read_trajectory
from rlbench.reports.methods import detect_methods
from rlbench.results import CellResult

CURVE_KEYS = ("reward_mean", "kl", "loss", "dev_greedy", "entropy")


def _ts(value: str | None) -> float | None:
    if not value:
        return None
    return dt.datetime.strptime(value, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=dt.timezone.utc).timestamp()


def timeline(trajectory: list[dict[str, Any]], started: str | None) -> list[dict[str, Any]]:
    """Each tool call with its start (seconds since the cell started), duration, outcome, a summary."""
    t0 = _ts(started)
    rows = []
    for s in trajectory:
        end = _ts(s.get("time"))
        seconds = float(s.get("seconds") or 0.0)
        args, result = s.get("args") or {}, s.get("result") or {}
        what = args.get("command") or args.get("path") or (args.get("code") or "")[:80] or ""
        rows.append({"step": s.get("step"), "tool": s.get("tool"), "ok": bool(s.get("ok")), "seconds": round(seconds, 2),
                     "start": round(end - seconds - t0, 1) if end is not None and t0 is not None else None,
                     "what": str(what)[:160], "error": str(result.get("error") or
                                                            (result.get("stderr") or "")[-300:] if not s.get("ok") else "")})
    return rows


MAX_WALK = 200_000  # entries looked at in a workspace
MAX_RUNS = 200  # step logs read
MAX_STEPS_BYTES = 16 * 1024 * 1024  # one step log


def training_runs(workspace: Path) -> list[dict[str, Any]]:
    """Every steps.jsonl a training run left in the workspace (runs/, sweeps/, anywhere)."""
    runs = []
    workspace = Path(workspace)
    found = sorted(f.rel for f in safefs.walk_files(workspace, max_files=MAX_WALK, skip_dirs=("model", ".git"))
                   if f.rel.rsplit("/", 1)[-1] == "steps.jsonl")
    for rel in found[:MAX_RUNS]:
        text = safefs.try_read_text(workspace, rel, MAX_STEPS_BYTES)  # the agent's file: no links, no FIFOs, capped
        if text is None:
            continue
        rows = []
        for line in text.splitlines():
            try:
                rec = json.loads(line)
            except json.JSONDecodeError:
                continue
            if isinstance(rec, dict) and "step" in rec:
                rows.append(rec)
        if rows:
            curves = {k: [[r["step"], r[k]] for r in rows if isinstance(r.get(k), (int, float))] for k in CURVE_KEYS}
            runs.append({"run": rel.rsplit("/", 1)[0] if "/" in rel else ".", "steps": len(rows),
                         "curves": {k: v for k, v in curves.items() if v}})
    return runs


def _is_output(name: str) -> bool:
    """What training left behind (checkpoint configs, step logs, sweep tables), not code."""
    parts = name.split("/")
    return (any(p.startswith("checkpoint") for p in parts[:-1]) or parts[-1] in ("steps.jsonl", "summary.json")
            or parts[0] == "sweeps")


def code_revisions(cell_dir: Path) -> dict[str, Any]:
    """From the agent's snapshot repository: commits, files touched, lines added and removed."""
    git_dir = cell_dir / "snapshots.git"
    if not git_dir.is_dir():
        return {"commits": 0, "files": [], "added": 0, "removed": 0, "output_files": 0, "log": []}

    def git(*args: str) -> str:
        return subprocess.run(["git", "-c", "safe.directory=*", f"--git-dir={git_dir}", *args], capture_output=True,
                              text=True, timeout=60).stdout

    root = git("rev-list", "--max-parents=0", "HEAD").split()
    if not root:
        return {"commits": 0, "files": [], "added": 0, "removed": 0, "output_files": 0, "log": []}
    since = [f"{root[0]}..HEAD"]  # the first commit is the workspace as the harness gave it
    commits = [line for line in git("log", "--format=%h %s", *since).splitlines() if line]
    touched: dict[str, dict[str, int]] = {}
    outputs = set()
    for line in git("log", "--numstat", "--format=", *since).splitlines():
        parts = line.split("\t")
        if len(parts) == 3:
            added, removed, name = parts
            if _is_output(name):
                outputs.add(name)
                continue
            t = touched.setdefault(name, {"added": 0, "removed": 0, "commits": 0})
            t["added"] += int(added) if added.isdigit() else 0
            t["removed"] += int(removed) if removed.isdigit() else 0
            t["commits"] += 1
    return {"commits": len(commits), "log": commits[:50], "output_files": len(outputs),
            "files": [{"file": k, **v} for k, v in sorted(touched.items())],
            "added": sum(v["added"] for v in touched.values()), "removed": sum(v["removed"] for v in touched.values())}


def build_cell_report(cell_dir: Path) -> dict[str, Any]:
    cell_dir = Path(cell_dir).resolve()
    if not (cell_dir / "result.json").is_file():
        from rlbench.config.core import ConfigError

        raise ConfigError(f"{cell_dir} is not a cell folder (no result.json)")
    try:
        r = CellResult.load(cell_dir / "result.json")
    except ValueError as exc:
        from rlbench.config.core import ConfigError

        raise ConfigError(f"{cell_dir}: result.json is not a cell result ({exc})") from exc
    trajectory = read_trajectory(cell_dir / "trajectory.jsonl")
    subs_path = cell_dir / "submissions.jsonl"
    submissions = [json.loads(line) for line in subs_path.read_text().splitlines() if line.strip()] if subs_path.is_file() else []
    workspace = cell_dir / "workspace"
    commands = [(s.get("step"), (s.get("args") or {}).get("command", "")) for s in trajectory if s.get("tool") == "exec"]
    steps = timeline(trajectory, r.started)
    failures = [s for s in steps if not s["ok"]]
    return {
        "cell": r.cell, "agent": r.agent, "task": r.task, "seed": r.seed,
        "status": r.status.value, "reason": r.reason, "sandboxed": r.sandboxed,
        "started": r.started, "finished": r.finished, "cell_seconds": r.cell_seconds,
        # a cell the harness stopped before the agent ran has no budget or capabilities section:
        # its report shows them empty ("-") rather than failing on a missing number
        "budget": {**dict.fromkeys(("wall_seconds", "used_seconds", "tool_calls")), **(r.budget or {})},
        "baseline": r.baseline or {}, "scores": r.scores or {},
        "gains": {split: g.to_dict() for split, g in (r.gains or {}).items()},
        "vs_baseline_config": r.vs_baseline_config,
        "sampling_only_gain": r.sampling_only_gain,  # a sampled gain with no greedy gain
        "capabilities": {**dict.fromkeys(("autonomy", "correctness", "execution_seconds", "peak_memory_mb", "recovery",
                                          "sweep_seconds")), **(r.capabilities or {})},
        "robustness": r.robustness,
        "sweeps": r.sweeps or [], "wave": r.wave or "",
        "integrity": r.integrity, "dev_test_gap": r.dev_test_gap,
        "anytime": r.anytime, "compute": r.compute, "reward_hacking": r.reward_hacking,
        "timeline": steps,
        "tools": {tool: sum(1 for s in steps if s["tool"] == tool) for tool in sorted({s["tool"] for s in steps})},
        "failures": failures,
        "recoveries": [{"failed": f["step"], "next_success": next((s["step"] for s in steps
                                                                   if s["step"] > f["step"] and s["ok"]
                                                                   and s["tool"] == f["tool"]), None)}
                       for f in failures],
        "submissions": [{k: s.get(k) for k in ("index", "t", "ok", "dev", "dev_ci", "reason", "recipe", "submitted_path")}
                        for s in submissions],
        "chosen": (r.chosen_checkpoint or {}).get("index"),
        "training_runs": training_runs(workspace) if workspace.is_dir() else [],
        "code": code_revisions(cell_dir),
        "methods": detect_methods(workspace, commands) if workspace.is_dir() else {},
    }
