"""The run report of one cell: what the agent did, what it trained, what it submitted, and why the
cell ended as it did. Built only from harness records (result, trajectory, submissions, the code
snapshots), the step logs the training runs left in the workspace, and, for LLM agents, their
conversation (conversation.jsonl) with the tokens and cost per driver model (result.json's
`llm_usage`).

The conversation holds an untrusted agent's words: it is read through rlbench.safefs (no link
followed, regular files only) within caps on bytes, lines and line length; a line that is not a
JSON object or is too long is skipped and counted; every text is cut to `TEXT_CAP` characters and
all of them together to `TRANSCRIPT_TEXT_BUDGET`, so a runaway agent cannot make a report that no
browser opens. The HTML template escapes every value (Jinja autoescape); none is marked safe.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import subprocess
from pathlib import Path
from typing import Any

from rlbench import safefs
from rlbench.record import read_trajectory
from rlbench.reports.export import read_jsonl_bounded
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


# LLM use -----------------------------------------------------------------------------------------

MAX_MODELS = 50  # driver models of llm_usage shown


def _count(value: Any) -> int:
    """A token or request count from result.json: 0 unless it is a finite non-negative number."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return int(value) if ok else 0


def _usd(value: Any) -> float | None:
    """A cost from result.json: None (unknown) unless it is a finite non-negative number."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value >= 0
    return float(value) if ok else None


def model_usage(llm_usage: Any) -> list[dict[str, Any]]:
    """One row per driver model of a cell's `llm_usage`: tokens in (of them, cached) and out, their
    sum, requests, and the cost in USD (None: no price for that model, which is not the same as
    free). result.json is a file: whatever in it is not a model's record is left out and a count
    that is not a finite non-negative number reads as 0, so an older or hand-edited result cannot
    break a report or a leaderboard."""
    if not isinstance(llm_usage, dict):
        return []
    rows = []
    for name, use in list(llm_usage.items())[:MAX_MODELS]:
        if not isinstance(use, dict):
            continue
        inp, out = _count(use.get("input_tokens")), _count(use.get("output_tokens"))
        rows.append({"model": str(name)[:200], "requests": _count(use.get("requests")), "input_tokens": inp,
                     "cached_tokens": _count(use.get("cached_tokens")), "output_tokens": out, "tokens": inp + out,
                     "cost_usd": _usd(use.get("cost_usd"))})
    return rows


USAGE_SUMS = ("requests", "input_tokens", "cached_tokens", "output_tokens", "tokens")


def usage_total(models: list[dict[str, Any]]) -> dict[str, Any]:
    """A cell's LLM use over all its models (`model_usage` rows). Tokens are input + output: cached
    tokens are part of the input, so they are not added again. The cost is the sum of the known
    costs, None when no model has one (an unknown cost must never read as $0), with `unpriced`
    naming the models without one (then a known sum is a lower bound). No models at all (an agent
    without an LLM, or one that never called it): every figure None, shown as "-"."""
    if not models:
        return {**dict.fromkeys(USAGE_SUMS), "cost_usd": None, "unpriced": []}
    costs = [m["cost_usd"] for m in models if m["cost_usd"] is not None]
    return {**{k: sum(m[k] for m in models) for k in USAGE_SUMS},
            "cost_usd": round(sum(costs), 6) if costs else None,
            "unpriced": [m["model"] for m in models if m["cost_usd"] is None]}


# the transcript ------------------------------------------------------------------------------------

TRANSCRIPT_BYTES = 16 * 1024 * 1024  # of conversation.jsonl read
TRANSCRIPT_LINES = 20_000  # records of it read
TRANSCRIPT_LINE_BYTES = 1024 * 1024  # a longer line is skipped (and counted)
TEXT_CAP = 4_000  # characters of one message, tool call's arguments or tool result shown
TRANSCRIPT_TEXT_BUDGET = 2_000_000  # characters of all of them together
MAX_CALLS = 50  # tool calls of one reply shown
_REFUSALS = ("malformed_tool_call", "unknown_tool", "bad_arguments")  # react's records of calls it never ran
_RECORD_KEYS = ("time", "event", "step", "turn")  # an event record's keys that its entry shows elsewhere


class _Texts:
    """Cuts each shown text to a cap and all of them together to a budget, saying what was cut,
    so that an agent that wrote megabytes cannot make a report no browser opens."""

    def __init__(self, budget: int | None = None) -> None:
        self.left = TRANSCRIPT_TEXT_BUDGET if budget is None else budget
        self.cut = 0  # texts shown shorter than they are

    def __call__(self, value: Any, cap: int = TEXT_CAP) -> str:
        if value is None:
            return ""
        text = value if isinstance(value, str) else _dump(value)
        text = text.encode("utf-8", "replace").decode("utf-8")  # lone surrogates, which a JSON escape can carry
        keep = max(0, min(cap, self.left))
        self.left -= min(len(text), keep)
        if len(text) <= keep:
            return text
        self.cut += 1
        why = "" if keep == cap else " (the report's budget for the transcript is spent)"
        return text[:keep] + f" [... {len(text) - keep} more characters not shown{why}]"


def _dump(value: Any) -> str:
    """A non-text value as compact JSON; one that will not serialize says so instead."""
    try:
        return json.dumps(value, ensure_ascii=False, separators=(", ", ": "))
    except (TypeError, ValueError, RecursionError):
        return "[a value that is not JSON: not shown]"


def _seconds(value: Any) -> float | None:
    """An ISO 8601 time (UTC unless it names a zone) as epoch seconds; None for anything else."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        t = dt.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=dt.timezone.utc)).timestamp()


def _since(value: Any, t0: float | None) -> float | None:
    """Seconds from the cell's start to a record's time, as the timeline counts them."""
    t = _seconds(value)
    return round(t - t0, 1) if t is not None and t0 is not None else None


def _turn(record: dict[str, Any]) -> int | None:
    turn = record.get("turn")
    return turn if isinstance(turn, int) and not isinstance(turn, bool) else None


def _tokens_note(value: Any) -> str:
    """A reply's token counts (react writes its running totals) as "prompt 100, completion 20"."""
    if not isinstance(value, dict):
        return ""
    return ", ".join(f"{str(k)[:40]} {v}" for k, v in list(value.items())[:8]
                     if isinstance(v, (int, float)) and not isinstance(v, bool))


def _call(raw: Any, fallback_id: str, text: _Texts) -> dict[str, Any]:
    """An OpenAI-shaped tool call {id, type, function: {name, arguments}} as the report shows it."""
    raw = raw if isinstance(raw, dict) else {}
    fn = raw.get("function") if isinstance(raw.get("function"), dict) else {}
    return {"id": text(raw.get("id"), 200) or fallback_id, "name": text(fn.get("name"), 200) or "?",
            "arguments": text(_readable(fn.get("arguments"))), "link": "", "step": None}


def _readable(arguments: Any) -> Any:
    """A call's arguments or a harness result as a reader wants them: a JSON object one
    `key: value` a line, its text values as written (a command's or its output's newlines as
    newlines, not `\\n`); anything else as it came (an agent's malformed arguments are worth
    seeing as they are)."""
    try:
        args = json.loads(arguments) if isinstance(arguments, str) and len(arguments) <= TEXT_CAP * 4 else arguments
    except (ValueError, RecursionError):
        return arguments
    if not isinstance(args, dict) or not args:
        return arguments
    return "\n".join(f"{str(k)[:100]}: {v if isinstance(v, str) else _dump(v)}" for k, v in list(args.items())[:50])


def _link(call: dict[str, Any], record: dict[str, Any], refusals: list[dict[str, Any]],
          steps: list[dict[str, Any]], trajectory: list[dict[str, Any]], taken: set[int], text: _Texts) -> None:
    """Pair a call of an agent that logs no tool results (react) with what became of it: the
    driver's refusal (malformed or unknown call) of that turn, else the harness's next unpaired
    record of the same tool, whose result is the call's result; else it left no record (react's
    `finish`, say). The harness's records are searched forward, not only the next one, so a call of
    the harness's own between them (a CLI's prompt file) does not unpair every call after it."""
    refusal = next((x for x in refusals if x.get("turn") == record.get("turn") and x.get("tool") == call["name"]), None)
    if refusal is not None:
        refusals.remove(refusal)
        call.update(link="refused", refusal=text(refusal.get("event"), 100),
                    result=text(refusal.get("error") or refusal.get("arguments") or ""))
        return
    start = max(taken) + 1 if taken else 0
    i = next((i for i in range(start, len(steps)) if steps[i]["tool"] == call["name"]), None)
    if i is None:
        call["link"] = "none"
        return
    taken.add(i)
    s = steps[i]
    call.update(link="step", step=s["step"], ok=s["ok"], seconds=s["seconds"],
                result=text(_readable(trajectory[i].get("result")) if isinstance(trajectory[i], dict) else None))


def _entries(records: list[dict[str, Any]], steps: list[dict[str, Any]], trajectory: list[dict[str, Any]],
             t0: float | None, text: _Texts) -> tuple[list[dict[str, Any]], set[int]]:
    """The conversation's records as the report's entries, and which harness records (indices of
    `steps`) a call was paired with."""
    own_results = any(r.get("event") == "tool_result" for r in records)  # coding-agent CLIs log their own
    refusals = [r for r in records if r.get("event") in _REFUSALS]
    names: dict[str, str] = {}  # call id -> tool name, for the results that name only the id
    taken: set[int] = set()
    entries: list[dict[str, Any]] = []
    for n, r in enumerate(records):
        kind, base = r.get("event"), {"t": _since(r.get("time"), t0), "time": text(r.get("time"), 40), "turn": _turn(r)}
        if kind == "reply":
            msg = r.get("message") if isinstance(r.get("message"), dict) else {}
            raw = msg.get("tool_calls") if isinstance(msg.get("tool_calls"), list) else []
            calls = [_call(c, f"r{n}c{i}", text) for i, c in enumerate(raw[:MAX_CALLS])]
            for c in calls:
                names[c["id"]] = c["name"]
                if not own_results:
                    _link(c, r, refusals, steps, trajectory, taken, text)
            entries.append({"kind": "reply", **base, "text": text(msg.get("content")), "calls": calls,
                            "more_calls": max(0, len(raw) - MAX_CALLS), "tokens": _tokens_note(r.get("tokens"))})
        elif kind == "tool_result":
            call_id = text(r.get("tool_call_id"), 200)
            entries.append({"kind": "tool_result", **base, "call_id": call_id, "tool": names.get(call_id, "?"),
                            "text": text(r.get("content"))})
        elif kind not in _REFUSALS or own_results:  # react's refusals are shown with their calls
            rest = {k: v for k, v in r.items() if k not in _RECORD_KEYS}
            entries.append({"kind": "event", **base, "event": text(kind, 100) or "record",
                            "text": "; ".join(f"{text(k, 100)}: {text(v, 1000)}" for k, v in list(rest.items())[:20])})
    return entries, taken


def transcript(cell_dir: Path, steps: list[dict[str, Any]], trajectory: list[dict[str, Any]],
               started: str | None) -> dict[str, Any]:
    """The agent's conversation (conversation.jsonl: replies with their tool calls, tool results,
    the driver's other records) interleaved with the harness's tool calls (`steps`, the timeline's
    rows of `trajectory`). A call the harness ran is shown with it (react logs no results of its
    own: the harness's record is its result); every other harness call takes its place by its
    start time, before the first record written after it started (a coding-agent CLI's run is
    one harness call, and its conversation, written as the harness read it, follows it). Without
    a conversation (null, reference or command agents) the entries are the harness's calls."""
    read = read_jsonl_bounded(Path(cell_dir), "conversation.jsonl", TRANSCRIPT_BYTES, TRANSCRIPT_LINES,
                              TRANSCRIPT_LINE_BYTES)
    text = _Texts()
    entries, taken = _entries(read.records, steps, trajectory, _seconds(started), text)
    pending = iter([{"kind": "step", "t": s["start"], **s} for i, s in enumerate(steps) if i not in taken])
    merged: list[dict[str, Any]] = []
    step = next(pending, None)
    for e in entries:
        while step is not None and step["t"] is not None and e["t"] is not None and step["t"] < e["t"]:
            merged.append(step)
            step = next(pending, None)
        merged.append(e)
    merged.extend([step, *pending] if step is not None else [])
    return {**read.summary(), "texts_cut": text.cut, "entries": merged}


def _flat(detail: Any, prefix: str = "") -> dict[str, Any]:
    """A reward's breakdown as `key.sub: value` pairs (honest_int: flat rates; skill_exact: per skill)."""
    if not isinstance(detail, dict):
        return {prefix: detail}
    out: dict[str, Any] = {}
    for k, v in detail.items():
        out.update(_flat(v, f"{prefix}.{k}" if prefix else str(k)))
    return out


def breakdown_rows(baseline: dict[str, Any], scores: dict[str, Any]) -> list[dict[str, Any]]:
    """The reward's breakdown of the greedy completions (rlbench/rewards reward_breakdown), base
    beside chosen checkpoint, per hidden split: where a score came from (abstentions, skills)."""
    rows = []
    for split in ("test", "heldout"):
        base = _flat(((baseline.get(split) or {}).get("detail") or {}).get("greedy") or {})
        new = _flat(((scores.get(split) or {}).get("detail") or {}).get("greedy") or {})
        rows += [{"split": split, "key": k, "base": base.get(k), "score": new.get(k)} for k in new]
    return rows


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
    submissions = read_trajectory(subs_path)  # every complete line: a crash's torn last line is skipped
    workspace = cell_dir / "workspace"
    commands = [(s.get("step"), (s.get("args") or {}).get("command", "")) for s in trajectory if s.get("tool") == "exec"]
    steps = timeline(trajectory, r.started)
    failures = [s for s in steps if not s["ok"]]
    models = model_usage(r.llm_usage)
    return {
        "cell": r.cell, "agent": r.agent, "task": r.task, "seed": r.seed,
        "status": r.status.value, "reason": r.reason, "sandboxed": r.sandboxed,
        "started": r.started, "finished": r.finished, "cell_seconds": r.cell_seconds,
        # a cell the harness stopped before the agent ran has no budget or capabilities section:
        # its report shows them empty ("-") rather than failing on a missing number
        "budget": {**dict.fromkeys(("wall_seconds", "used_seconds", "tool_calls")), **(r.budget or {})},
        "baseline": r.baseline or {}, "scores": r.scores or {},
        "breakdown": breakdown_rows(r.baseline or {}, r.scores or {}),
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
        # an LLM agent's words and calls beside the harness's records, and what they cost
        "transcript": transcript(cell_dir, steps, trajectory, r.started),
        "usage": {"models": models, "total": usage_total(models)} if models else None,
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
