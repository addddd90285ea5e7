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
from rlbench.io import read_json
from rlbench.reports.methods import detect_methods

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
    result = read_json(cell_dir / "result.json")
    trajectory = read_trajectory(cell_dir / "trajectory.jsonl")
    subs_path = cell_dir / "submissions.jsonl"
    submissions = [json.loads(line) for line in subs_path.read_text().splitlines() if line.strip()] if subs_path.is_file() else []
    workspace = cell_dir / "workspace"
    commands = [(s.get("step"), (s.get("args") or {}).get("command", "")) for s in trajectory if s.get("tool") == "exec"]
    steps = timeline(trajectory, result.get("started"))
    failures = [r for r in steps if not r["ok"]]
    return {
        "cell": result.get("cell"), "agent": result.get("agent"), "task": result.get("task"), "seed": result.get("seed"),
        "status": result.get("status"), "reason": result.get("reason", ""), "sandboxed": result.get("sandboxed"),
        "started": result.get("started"), "finished": result.get("finished"), "cell_seconds": result.get("cell_seconds"),
        # a cell the harness stopped before the agent ran has no budget or capabilities section:
        # its report shows them empty ("-") rather than failing on a missing number
        "budget": {**dict.fromkeys(("wall_seconds", "used_seconds", "tool_calls")), **(result.get("budget") or {})}, "baseline": result.get("baseline", {}), "scores": result.get("scores", {}),
        "gains": result.get("gains", {}), "vs_baseline_config": result.get("vs_baseline_config"),
        "sampling_only_gain": result.get("sampling_only_gain"),  # a sampled gain with no greedy gain
        "capabilities": {**dict.fromkeys(("autonomy", "correctness", "execution_seconds", "peak_memory_mb", "recovery",
                                          "sweep_seconds")), **(result.get("capabilities") or {})}, "robustness": result.get("robustness"),
        "sweeps": result.get("sweeps", []), "wave": result.get("wave") or "",
        "integrity": result.get("integrity"), "dev_test_gap": result.get("dev_test_gap"),
        "anytime": result.get("anytime"), "compute": result.get("compute"), "reward_hacking": result.get("reward_hacking"),
        "timeline": steps,
        "tools": {tool: sum(1 for r in steps if r["tool"] == tool) for tool in sorted({r["tool"] for r in steps})},
        "failures": failures,
        "recoveries": [{"failed": f["step"], "next_success": next((r["step"] for r in steps
                                                                   if r["step"] > f["step"] and r["ok"]
                                                                   and r["tool"] == f["tool"]), None)}
                       for f in failures],
        "submissions": [{k: s.get(k) for k in ("index", "t", "ok", "dev", "dev_ci", "reason", "recipe", "submitted_path")}
                        for s in submissions],
        "chosen": (result.get("chosen_checkpoint") or {}).get("index"),
        "training_runs": training_runs(workspace) if workspace.is_dir() else [],
        "code": code_revisions(cell_dir),
        "methods": detect_methods(workspace, commands) if workspace.is_dir() else {},
    }
