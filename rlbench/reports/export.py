"""A cell's trajectory as an Inspect AI eval log, which `inspect view` opens and
`inspect_ai.log.read_eval_log` reads back (`rlbench export CELL_DIR`).

Why Inspect's eval log and not Harbor's ATIF (Agent Trajectory Interchange Format): both are read
by pydantic models, Harbor's the stricter (unknown keys forbidden, step ids and tool-call
references checked; Inspect's checks every type and required field but ignores unknown keys), but
only Inspect's installs here. `harbor` (whose package holds the ATIF models and its viewer)
requires Python >= 3.12 in every release on PyPI, and rlbench's virtual environment is Python
3.11, so an ATIF file could not be checked by its reader at all; `inspect_ai` installs into it
without touching torch, transformers, numpy or pydantic (it moves fsspec to 2026.6.0 and
python-dateutil to 2.9, both within what datasets and pandas accept). Inspect's format also has
a place for everything a cell holds: the messages with tool calls and tool results
(`EvalSample.messages`), the harness's scores (`EvalSample.scores`, one per figure), the driver
model's tokens and cost (`EvalSample.model_usage`, `EvalStats.model_usage`) and the cell's start,
end and duration; ATIF keeps no score (Harbor keeps rewards beside the trajectory, not in it).
The export is one log with one sample, built from Inspect's own models and written with its own
writer, so a field of the wrong type fails here, not in the viewer.

What goes where:

- the first message is the task description the agent was handed (the workspace's
  `description.md`; the task's name when it is gone);
- with `conversation.jsonl` (LLM agents), its replies become assistant messages with their tool
  calls; the tool results come from its `tool_result` records (coding-agent CLIs) or, where the
  agent logs none (react), from `trajectory.jsonl`, paired with the calls in order by tool name (a
  call the agent refused as malformed or unknown gets its error instead, and one the harness has
  no record of says so). Its other records (API errors, stops, compactions) become info events;
- without one (null, reference, command agents), every `trajectory.jsonl` record becomes an
  assistant tool call and its tool message;
- every `trajectory.jsonl` record is also a tool event of the transcript (what the harness ran,
  with its time and duration);
- scores: test and heldout pass@1 of the chosen checkpoint (the base model's in metadata) and the
  paired gain over the base model with its 95% interval, fractions as result.json keeps them;
- model usage from `llm_usage`: Inspect's `input_tokens` is rlbench's as the agent reported it,
  `input_tokens_cache_read` its cached tokens (counted in the input or not, as the provider
  reports: `total_tokens` is input + output, so a cached token is never counted twice);
- the viewer is told the content is untrusted (`ViewerConfig(trust_content=False)`): every word
  in it came from a model or from commands a model ran, so it is shown as plain text.

Every file is read as untrusted input: through rlbench.safefs (no link followed, regular files
only), capped in bytes and lines; a line that is not a JSON object, is too long or too deep is
skipped and counted (the sample's `metadata.rlbench_export` says how many, per file), and every
text is cut to `MAX_TEXT` characters with a note of how much was cut.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from rlbench import safefs
from rlbench.results import CellResult, Gain

FORMATS = ("inspect",)  # "atif" is refused with the reason (the module docstring)
RESULT_CAP = 16 * 1024 * 1024  # bytes of result.json read
JSONL_CAP = 64 * 1024 * 1024  # bytes of conversation.jsonl or trajectory.jsonl read
MAX_LINES = 50_000  # lines of one JSONL file read
MAX_LINE_BYTES = 2 * 1024 * 1024  # a longer line is skipped
DESCRIPTION_CAP = 256 * 1024  # bytes of the task description read
MAX_TEXT = 100_000  # characters of one message, tool result or argument kept
MAX_CALLS = 100  # tool calls of one reply kept
MAX_ITEMS = 1_000  # items of one list or keys of one object kept in metadata and arguments
MAX_DEPTH = 24  # nesting kept in metadata and arguments; deeper values become a note
MAX_MODELS = 50  # models of llm_usage kept
SPLITS = ("test", "heldout")


class ExportError(ValueError):
    """The cell cannot be exported: no readable result.json, or an unknown format or output path."""


@dataclass
class JsonlRead:
    """The JSON objects of one JSONL file, read within the caps, and what was left out."""

    records: list[dict[str, Any]]
    skipped: int = 0  # lines that were not a JSON object, too long or too deeply nested
    truncated: bool = False  # the file went past JSONL_CAP bytes or MAX_LINES lines
    present: bool = False

    def summary(self) -> dict[str, Any]:
        return {"present": self.present, "records": len(self.records), "skipped_lines": self.skipped,
                "truncated": self.truncated}


def read_jsonl_bounded(cell_dir: Path, name: str, max_bytes: int | None = None, max_lines: int | None = None,
                       max_line_bytes: int | None = None) -> JsonlRead:
    """`cell_dir/name` line by line within the caps (None: JSONL_CAP, MAX_LINES, MAX_LINE_BYTES);
    a missing, linked or special file reads as empty (`present` False)."""
    max_bytes = JSONL_CAP if max_bytes is None else max_bytes
    max_lines = MAX_LINES if max_lines is None else max_lines
    max_line_bytes = MAX_LINE_BYTES if max_line_bytes is None else max_line_bytes
    try:
        data, size = safefs.read_head(cell_dir, name, max_bytes)
    except OSError:
        return JsonlRead([])
    out = JsonlRead([], present=True, truncated=size > max_bytes)
    lines = data.split(b"\n")
    if size > max_bytes and lines and lines.pop().strip():  # the line the cap cut in two
        out.skipped += 1
    for n, line in enumerate(lines):
        if n >= max_lines:
            out.truncated = True
            break
        if not line.strip():
            continue
        if len(line) > max_line_bytes:
            out.skipped += 1
            continue
        try:
            record = json.loads(line)
        except (ValueError, RecursionError):  # RecursionError: nested deeper than the parser goes
            out.skipped += 1
            continue
        if not isinstance(record, dict):
            out.skipped += 1
            continue
        out.records.append(record)
    return out


def export_cell(cell_dir: Path, fmt: str = "inspect", out: Path | None = None) -> Path:
    """Write the cell in `cell_dir` as one sample of an Inspect eval log and return its path.

    `out`: a file ending in .eval (Inspect's default, a zip) or .json, or a folder to write
    `<cell>.eval` into; None: `cell_dir/inspect/<cell>.eval` (`inspect view --log-dir` that folder).
    ExportError when the format is not one of FORMATS, the output is not one of those, or the cell
    has no readable result.json."""
    if fmt == "atif":
        raise ExportError("format atif: Harbor's ATIF models (PyPI harbor) need Python >= 3.12 and this "
                          "environment is older, so no reader could check the file; use --format inspect")
    if fmt not in FORMATS:
        raise ExportError(f"unknown export format {fmt!r}: one of {', '.join(FORMATS)}")
    cell_dir = Path(cell_dir)
    result = _load_result(cell_dir)
    target = _target(cell_dir, result, out)
    log = build_eval_log(cell_dir, result)
    from inspect_ai.log import write_eval_log

    target.parent.mkdir(parents=True, exist_ok=True)
    write_eval_log(log, str(target), format="eval" if target.suffix == ".eval" else "json")
    return target


def _load_result(cell_dir: Path) -> CellResult:
    try:
        raw = safefs.read_bytes(cell_dir, "result.json", RESULT_CAP)
        return CellResult.from_dict(json.loads(raw))
    except FileNotFoundError:
        raise ExportError(f"{cell_dir}: no result.json (not a cell folder?)") from None
    except (OSError, ValueError, RecursionError) as exc:
        raise ExportError(f"{cell_dir}/result.json is not a readable cell result: {exc}") from None


def _target(cell_dir: Path, result: CellResult, out: Path | None) -> Path:
    name = f"{_safe_name(result.cell or cell_dir.name)}.eval"
    if out is None:
        return cell_dir / "inspect" / name
    out = Path(out)
    if out.suffix in (".eval", ".json"):
        return out
    if out.suffix and not out.is_dir():
        raise ExportError(f"--out {out}: an Inspect log ends in .eval or .json (or give a folder)")
    return out / name


def _safe_name(text: str) -> str:
    name = "".join(c if c.isalnum() or c in "-_." else "_" for c in str(text))[:200].strip(".")
    return name or "cell"


# the log ----------------------------------------------------------------------------------------

def build_eval_log(cell_dir: Path, result: CellResult) -> Any:
    """The `inspect_ai.log.EvalLog` of one cell (one sample), built from its folder."""
    from inspect_ai.log import (EvalConfig, EvalDataset, EvalError, EvalLog, EvalMetric, EvalPlan, EvalPlanStep,
                                EvalResults, EvalSample, EvalScore, EvalSpec, EvalStats)
    from inspect_ai.model import ChatCompletionChoice, ChatMessageAssistant, ModelOutput
    from inspect_ai.viewer import ViewerConfig

    conversation = read_jsonl_bounded(cell_dir, "conversation.jsonl")
    trajectory = read_jsonl_bounded(cell_dir, "trajectory.jsonl")
    description, description_from, description_cut = _description(cell_dir, result)
    usage = _model_usage(result.llm_usage)
    # the log's model: the one that used the most tokens ("none" for an agent without one)
    model = max(usage, key=lambda k: usage[k].total_tokens) if usage else "none"
    fallback_time = _time(result.started) or _time(result.finished) or datetime.now(timezone.utc)

    messages, events = _messages(description, conversation, trajectory, model if len(usage) == 1 else None,
                                 fallback_time)
    scores = _scores(result)
    started, finished = _time(result.started), _time(result.finished)
    total = _num(result.cell_seconds)
    if total is None and started and finished:
        total = (finished - started).total_seconds()
    status, error = _status(result)
    last = next((m for m in reversed(messages) if isinstance(m, ChatMessageAssistant)), None)
    output = ModelOutput(model=model, choices=[ChatCompletionChoice(message=last, stop_reason="stop")],
                         completion=last.text) if last is not None else ModelOutput(model=model)
    meta = _rlbench_meta(result)
    export_meta = {"conversation": conversation.summary(), "trajectory": trajectory.summary(),
                   "description": description_from, "description_truncated": description_cut,
                   "tool_events": sum(1 for e in events if getattr(e, "event", "") == "tool"),
                   "info_events": sum(1 for e in events if getattr(e, "event", "") == "info")}
    eval_error = EvalError(message=error, traceback="", traceback_ansi="") if error is not None else None
    sample = EvalSample(
        id=_text(result.cell, 200) or "cell", epoch=1, input=description, target="", messages=messages,
        output=output, scores=scores or None,
        metadata={"rlbench": meta, "rlbench_export": export_meta}, events=events,
        model_usage=usage, started_at=started.isoformat() if started else None,
        completed_at=finished.isoformat() if finished else None, total_time=total,
        working_time=_num(result.budget.get("used_seconds")) if isinstance(result.budget, dict) else None,
        uuid=_text(result.cell, 200) or None,
        error=eval_error)
    created = started or finished or fallback_time
    spec = EvalSpec(
        eval_id=_text(result.cell, 200), run_id=_text(result.cell, 200), created=created.isoformat(),
        task=f"rlbench/{_text(result.task, 200)}", task_id=_text(result.cell, 200),
        task_version=_text(result.task_version, 100) if result.task_version else 0,
        task_description=_text(description, 2000), solver=_text(result.agent, 200),
        dataset=EvalDataset(name=_text(result.task, 200), samples=1, sample_ids=[sample.id]),
        model=model, config=EvalConfig(), packages={"rlbench": _rlbench_version()},
        metadata={"rlbench": {k: meta[k] for k in ("cell", "agent", "task", "seed", "status") if k in meta}},
        viewer=ViewerConfig(trust_content=False))
    results = EvalResults(
        total_samples=1, completed_samples=1 if status == "success" else 0,
        scores=[EvalScore(name=name, scorer=name, scored_samples=1,
                          metrics={"mean": EvalMetric(name="mean", value=float(score.value))})
                for name, score in scores.items()])
    stats = EvalStats(started_at=started.isoformat() if started else "",
                      completed_at=finished.isoformat() if finished else "", model_usage=usage)
    return EvalLog(status=status, eval=spec, plan=EvalPlan(name="rlbench", steps=[
        EvalPlanStep(solver=_text(result.agent, 200))]), results=results, stats=stats, error=eval_error,
        samples=[sample])


def _status(result: CellResult) -> tuple[str, str | None]:
    """Inspect's log status and error message: a crashed or broken cell is an error, a running one
    started, every other final status a success (the sample's metadata keeps rlbench's status)."""
    status = str(result.status)
    if status == "running":
        return "started", None
    if status in ("crashed", "harness_broken"):
        return "error", _text(f"{status}: {result.reason}", MAX_TEXT)
    return "success", None


def _rlbench_meta(result: CellResult) -> dict[str, Any]:
    keep = ("cell", "agent", "task", "task_version", "seed", "status", "reason", "crash_by", "started",
            "finished", "cell_seconds", "sandboxed", "score_engine", "baseline", "scores", "gains", "budget",
            "compute", "submissions", "chosen_checkpoint", "llm_usage", "base_model")
    d = result.to_json_dict()
    meta = {k: _bounded(d[k]) for k in keep if k in d}
    integrity = d.get("integrity")
    if isinstance(integrity, dict):
        meta["integrity"] = _bounded({k: integrity.get(k) for k in ("verdict", "reasons", "n_events")})
    return meta


def _description(cell_dir: Path, result: CellResult) -> tuple[str, str, bool]:
    """The task description the agent was handed, where it came from, and whether it was cut."""
    try:
        data, size = safefs.read_head(cell_dir, "workspace/description.md", DESCRIPTION_CAP)
    except OSError:
        data, size = b"", -1
    text = _clean(data.decode("utf-8", "replace")).strip() if size >= 0 else ""
    if text:
        cut = size > DESCRIPTION_CAP
        return text + (f"\n\n[... {size - DESCRIPTION_CAP} more bytes not exported]" if cut else ""), \
            "workspace/description.md", cut
    return f"rlbench task {_text(result.task, 200)} (the cell keeps no description)", "task name", False


# messages ---------------------------------------------------------------------------------------

_REFUSED = {"malformed_tool_call": "parsing", "unknown_tool": "unknown", "bad_arguments": "unknown"}
_MESSAGE_EVENTS = ("reply", "tool_result")


def _messages(description: str, conversation: JsonlRead, trajectory: JsonlRead, model: str | None,
              fallback_time: datetime) -> tuple[list[Any], list[Any]]:
    """The sample's messages and its transcript events."""
    from inspect_ai.event import InfoEvent, ToolEvent
    from inspect_ai.model import ChatMessageAssistant, ChatMessageTool, ChatMessageUser
    from inspect_ai.tool import ToolCall, ToolCallError

    messages: list[Any] = [ChatMessageUser(id="m0", content=description, source="input")]
    events: list[Any] = []
    ids = iter(range(1, 10**9))

    def tool_message(call_id: str, function: str, content: str, error: tuple[str, str] | None = None) -> Any:
        return ChatMessageTool(id=f"m{next(ids)}", content=content, tool_call_id=call_id, function=function,
                               error=ToolCallError(error[0], error[1]) if error else None)  # type: ignore[arg-type]

    steps = trajectory.records
    for n, step in enumerate(steps, 1):
        ok = step.get("ok") is not False
        result = _json_text(step.get("result"))
        events.append(ToolEvent(
            id=f"step{n}", function=_text(step.get("tool"), 200) or "?", arguments=_arguments(step.get("args")),
            result=result, error=None if ok else ToolCallError("unknown", _text(result, 2000)),
            failed=None if ok else True, timestamp=_time(step.get("time")) or fallback_time,
            working_time=_num(step.get("seconds")), metadata=_bounded(
                {k: step.get(k) for k in ("step", "cpu_s", "snapshot", "ok") if k in step}),
            working_start=0.0))

    records = conversation.records
    if not any(r.get("event") == "reply" for r in records):
        # no conversation of its own: the harness's tool calls are the agent's actions
        for n, step in enumerate(steps, 1):
            name, call_id = _text(step.get("tool"), 200) or "?", f"step{n}"
            messages.append(ChatMessageAssistant(
                id=f"m{next(ids)}", content="", source="generate", model=model,
                tool_calls=[ToolCall(id=call_id, function=name, arguments=_arguments(step.get("args")))],
                metadata={"time": _text(step.get("time"), 100), "from": "trajectory.jsonl"}))
            ok = step.get("ok") is not False
            result = _json_text(step.get("result"))
            messages.append(tool_message(call_id, name, result, None if ok else ("unknown", _text(result, 2000))))
        for r in records:
            events.append(_info(r, fallback_time, InfoEvent))
        return messages, events

    own_results = any(r.get("event") == "tool_result" for r in records)
    refusals = [r for r in records if r.get("event") in _REFUSED]
    names: dict[str, str] = {}
    next_step = 0
    for r in records:
        kind = r.get("event")
        if kind == "reply":
            msg = r.get("message") if isinstance(r.get("message"), dict) else {}
            raw_calls = msg.get("tool_calls") if isinstance(msg.get("tool_calls"), list) else []
            calls = [_tool_call(c, f"r{len(messages)}c{i}", ToolCall) for i, c in enumerate(raw_calls[:MAX_CALLS])]
            for c in calls:
                names[c.id] = c.function
            meta = {k: _bounded(r[k]) for k in ("time", "turn", "finish_reason", "tokens") if k in r}
            messages.append(ChatMessageAssistant(id=f"m{next(ids)}", content=_text(msg.get("content"), MAX_TEXT),
                                                 source="generate", model=model, tool_calls=calls or None,
                                                 metadata=meta or None))
            if own_results:
                continue
            for c in calls:  # the agent logs no results: the harness's records, in order
                refusal = next((x for x in refusals if x.get("turn") == r.get("turn")
                                and _text(x.get("tool"), 200) == c.function), None)
                if refusal is not None:
                    refusals.remove(refusal)
                    why = f"{refusal.get('event')}: {_text(refusal.get('error') or c.function, 2000)}"
                    messages.append(tool_message(c.id, c.function, why, (_REFUSED[str(refusal.get("event"))], why)))
                elif next_step < len(steps) and _text(steps[next_step].get("tool"), 200) == c.function:
                    step = steps[next_step]
                    next_step += 1
                    result = _json_text(step.get("result"))
                    ok = step.get("ok") is not False
                    messages.append(tool_message(c.id, c.function, result,
                                                 None if ok else ("unknown", _text(result, 2000))))
                else:
                    messages.append(tool_message(c.id, c.function, "(the harness ran no tool for this call)"))
        elif kind == "tool_result":
            call_id = _text(r.get("tool_call_id"), 200)
            messages.append(tool_message(call_id, names.get(call_id, "?"), _text(r.get("content"), MAX_TEXT)))
        else:
            events.append(_info(r, fallback_time, InfoEvent))
    return messages, events


def _tool_call(raw: Any, fallback_id: str, tool_call: Any) -> Any:
    """An OpenAI-style tool call {id, type, function: {name, arguments}} as Inspect's ToolCall;
    arguments that are not a JSON object keep their text in `parse_error`."""
    raw = raw if isinstance(raw, dict) else {}
    fn = raw.get("function") if isinstance(raw.get("function"), dict) else {}
    args_raw, parse_error = fn.get("arguments"), None
    if isinstance(args_raw, str):
        try:
            args = json.loads(args_raw) if args_raw.strip() else {}
        except (ValueError, RecursionError) as exc:
            args, parse_error = {}, f"{exc}: {_text(args_raw, 2000)}"
    else:
        args = args_raw if args_raw is not None else {}
    if not isinstance(args, dict):
        args, parse_error = {}, f"arguments are not a JSON object: {_text(json.dumps(_bounded(args)), 2000)}"
    return tool_call(id=_text(raw.get("id"), 200) or fallback_id, function=_text(fn.get("name"), 200) or "?",
                     arguments=_arguments(args), parse_error=parse_error)


def _info(record: dict[str, Any], fallback_time: datetime, info_event: Any) -> Any:
    return info_event(source=f"rlbench/{_text(record.get('event'), 100) or 'record'}", data=_bounded(record),
                      timestamp=_time(record.get("time")) or fallback_time, working_start=0.0)


# scores and usage -------------------------------------------------------------------------------

def _scores(result: CellResult) -> dict[str, Any]:
    """test and heldout pass@1 of the chosen checkpoint and its gain over the base model."""
    from inspect_ai.scorer import Score

    out: dict[str, Any] = {}
    scores = result.scores if isinstance(result.scores, dict) else {}
    baseline = result.baseline if isinstance(result.baseline, dict) else {}
    for split in SPLITS:
        s = scores.get(split) if isinstance(scores.get(split), dict) else {}
        value = _num(s.get("pass_at_1"))
        if value is not None:
            base = baseline.get(split) if isinstance(baseline.get(split), dict) else {}
            out[f"{split}_pass_at_1"] = Score(
                value=value, explanation=f"pass@1 of the chosen checkpoint on the hidden {split} split",
                metadata=_bounded({"greedy": s.get("greedy"), "n": s.get("n"),
                                   "baseline_pass_at_1": base.get("pass_at_1"), "baseline_greedy": base.get("greedy")}))
        try:
            gain = result.gain(split)
            gain = Gain.coerce(gain) if gain is not None else None
        except ValueError:
            gain = None
        if gain is not None and _num(gain.abs) is not None:
            sig = "significant" if gain.significant else "not significant"
            out[f"{split}_gain"] = Score(
                value=float(gain.abs),
                explanation=f"paired gain over the base model on {split}: {gain.abs:+.4f} "
                            f"(95% CI [{_fmt(gain.ci_low)}, {_fmt(gain.ci_high)}], {sig})",
                metadata=_bounded(gain.to_dict()))
    return out


def _fmt(x: Any) -> str:
    v = _num(x)
    return "?" if v is None else f"{v:+.4f}"


def _model_usage(llm_usage: Any) -> dict[str, Any]:
    from inspect_ai.model import ModelUsage

    out: dict[str, Any] = {}
    if not isinstance(llm_usage, dict):
        return out
    for name, u in list(llm_usage.items())[:MAX_MODELS]:
        if not isinstance(u, dict):
            continue
        inp, outp = _int(u.get("input_tokens")), _int(u.get("output_tokens"))
        out[_text(name, 200) or "?"] = ModelUsage(
            input_tokens=inp, output_tokens=outp, total_tokens=inp + outp,
            input_tokens_cache_read=_int(u.get("cached_tokens")) if u.get("cached_tokens") is not None else None,
            total_cost=_num(u.get("cost_usd")))
    return out


# values from untrusted records ------------------------------------------------------------------

def _clean(text: str) -> str:
    """Lone surrogates (which JSON escapes can carry) made encodable."""
    return text.encode("utf-8", "replace").decode("utf-8")


def _text(value: Any, limit: int = MAX_TEXT) -> str:
    """A value as text of at most about `limit` characters (non-strings as JSON)."""
    if value is None:
        return ""
    text = value if isinstance(value, str) else _json_dump(value)
    text = _clean(text)
    if len(text) > limit:
        text = text[:limit] + f"\n[... {len(text) - limit} more characters not exported]"
    return text


def _json_dump(value: Any) -> str:
    try:
        return json.dumps(_bounded(value), ensure_ascii=False)
    except (TypeError, ValueError):
        return str(value)


def _json_text(value: Any) -> str:
    """A tool result as the text a tool message shows."""
    return value if isinstance(value, str) and len(value) <= MAX_TEXT else _text(value, MAX_TEXT)


def _bounded(value: Any, depth: int = 0) -> Any:
    """A JSON value with its strings, lists, objects and nesting capped (and strings encodable)."""
    if isinstance(value, str):
        return _clean(value) if len(value) <= MAX_TEXT else _text(value, MAX_TEXT)
    if isinstance(value, bool) or value is None or isinstance(value, int):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if depth >= MAX_DEPTH:
        return "[nested too deep: not exported]"
    if isinstance(value, dict):
        return {_text(k, 200): _bounded(v, depth + 1) for k, v in list(value.items())[:MAX_ITEMS]}
    if isinstance(value, (list, tuple)):
        return [_bounded(v, depth + 1) for v in list(value)[:MAX_ITEMS]]
    return _text(str(value), 2000)


def _arguments(args: Any) -> dict[str, Any]:
    bounded = _bounded(args)
    return bounded if isinstance(bounded, dict) else {"value": bounded}


def _num(x: Any) -> float | None:
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return None
    x = float(x)
    return x if math.isfinite(x) else None


def _int(x: Any) -> int:
    v = _num(x)
    return int(v) if v is not None and 0 <= v < 2**62 else 0


def _time(value: Any) -> datetime | None:
    """An ISO 8601 time (UTC when it names no zone), or None."""
    if not isinstance(value, str) or len(value) > 64:
        return None
    try:
        t = datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None
    return t if t.tzinfo else t.replace(tzinfo=timezone.utc)


def _rlbench_version() -> str:
    try:
        from importlib.metadata import version

        return version("rlbench")
    except Exception:  # noqa: BLE001 - a source checkout without an install record
        return "unknown"
