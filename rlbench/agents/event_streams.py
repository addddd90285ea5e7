"""Reading a coding-agent CLI's own event stream: its conversation and its token usage.

Each CLI prints what it does on stdout in a format of its own (Claude Code's stream-json, Codex's
`exec --json` events, Gemini CLI's stream-json, OpenCode's `run --format json`, Aider's text with
its "Tokens: ... Cost: ..." lines). A parser turns one into the records react writes to
conversation.jsonl (`reply` events with an OpenAI-shaped assistant message, `tool_result` events)
and into token counts and cost per model. Parsers are fed line by line while the CLI runs, so the
harness can stop it at a token or dollar budget, and once more at the end.

The stream is written by the agent's process: every line is capped, anything that is not the
expected shape is counted and skipped, and no number is taken unless it is a finite non-negative
one.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from typing import Any, Callable

MAX_LINE = 1_000_000  # bytes of one event line that are read
MAX_TEXT = 20_000  # characters of one message or tool result kept in the conversation
MAX_RECORDS = 20_000  # conversation records kept; more are counted in dropped_records


@dataclass
class ModelUsage:
    input_tokens: int = 0
    output_tokens: int = 0
    cached_tokens: int = 0  # of input_tokens, those read from the provider's prompt cache (always counted in both)
    requests: int = 0
    cost_usd: float | None = None  # what the CLI reported; None: it reports none

    @property
    def total_tokens(self) -> int:
        return self.input_tokens + self.output_tokens


def _n(value: Any) -> int:
    return int(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0 else 0


def _usd(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) \
        and value >= 0 else None


def _text(value: Any) -> str:
    if isinstance(value, str):
        s = value
    elif isinstance(value, list):  # content blocks
        s = "\n".join(_text(b.get("text", "")) if isinstance(b, dict) else _text(b) for b in value)
    elif value is None:
        return ""
    else:
        s = json.dumps(value)[:MAX_TEXT + 1]
    return s if len(s) <= MAX_TEXT else s[:MAX_TEXT] + f" ...[{len(s) - MAX_TEXT} chars cut]"


def _call(call_id: Any, name: Any, arguments: Any) -> dict[str, Any]:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments if arguments is not None else {})
    return {"id": str(call_id)[:200], "type": "function", "function": {"name": str(name)[:200], "arguments": _text(args)}}


@dataclass
class StreamParser:
    """Feed it lines; it keeps the conversation records and the usage per model."""

    default_model: str
    records: list[dict[str, Any]] = field(default_factory=list)
    usage: dict[str, ModelUsage] = field(default_factory=dict)
    skipped_lines: int = 0
    dropped_records: int = 0  # past MAX_RECORDS: a flood of tiny events must not fill the harness's memory
    final: dict[str, Any] = field(default_factory=dict)  # the CLI's own end-of-run summary, where it gives one
    _seen: set[str] = field(default_factory=set)
    _turn: int = 0

    def __post_init__(self) -> None:
        """A parser's own state (its subclasses set theirs here)."""

    def model_usage(self, model: str | None = None) -> ModelUsage:
        key = str(model or self.default_model)[:200]
        return self.usage.setdefault(key, ModelUsage())

    def _keep(self, record: dict[str, Any]) -> None:
        if len(self.records) < MAX_RECORDS:
            self.records.append(record)
        else:
            self.dropped_records += 1

    def reply(self, text: str = "", calls: list[dict[str, Any]] | None = None) -> None:
        self._turn += 1
        message: dict[str, Any] = {"role": "assistant", "content": text}
        if calls:
            message["tool_calls"] = calls
        self._keep({"event": "reply", "turn": self._turn, "message": message})

    def tool_result(self, call_id: Any, content: Any, name: str = "") -> None:
        self._keep({"event": "tool_result", "turn": self._turn, "tool_call_id": str(call_id)[:200],
                    **({"tool": name[:200]} if name else {}), "content": _text(content)})

    def feed(self, line: str | bytes) -> None:
        if isinstance(line, bytes):
            line = line[:MAX_LINE].decode("utf-8", "replace")
        line = line[:MAX_LINE].strip()
        if not line:
            return
        try:
            self.handle(line)
        except (ValueError, TypeError, AttributeError, KeyError):
            self.skipped_lines += 1

    def handle(self, line: str) -> None:
        event = json.loads(line)
        if not isinstance(event, dict):
            raise ValueError("not an object")
        self.handle_event(event)

    def handle_event(self, event: dict[str, Any]) -> None:
        raise NotImplementedError

    def close(self) -> None:
        """The stream ended: keep what a parser still holds (text not yet followed by its usage)."""

    def totals(self) -> ModelUsage:
        out = ModelUsage(cost_usd=None)
        for u in self.usage.values():
            out.input_tokens += u.input_tokens
            out.output_tokens += u.output_tokens
            out.cached_tokens += u.cached_tokens
            out.requests += u.requests
            if u.cost_usd is not None:
                out.cost_usd = (out.cost_usd or 0.0) + u.cost_usd
        return out


class ClaudeStream(StreamParser):
    """`claude -p --output-format stream-json --verbose`: system/init, assistant and user messages
    in the Messages API's shape, then one `result` with total_cost_usd and modelUsage."""

    def handle_event(self, e: dict[str, Any]) -> None:
        kind = e.get("type")
        message = e.get("message") if isinstance(e.get("message"), dict) else {}
        if kind == "system" and e.get("subtype") == "init" and isinstance(e.get("model"), str):
            self.default_model = e["model"][:200]
        elif kind == "assistant":
            blocks = [b for b in message.get("content") or [] if isinstance(b, dict)]
            text = "\n".join(_text(b.get("text")) for b in blocks if b.get("type") == "text")
            calls = [_call(b.get("id"), b.get("name"), b.get("input")) for b in blocks if b.get("type") == "tool_use"]
            self.reply(text, calls)
            mid = str(message.get("id") or "")
            usage = message.get("usage") if isinstance(message.get("usage"), dict) else None
            if usage and mid not in self._seen:  # one API reply may come as several events with one id
                self._seen.add(mid)
                u = self.model_usage(message.get("model"))
                u.requests += 1
                u.input_tokens += _n(usage.get("input_tokens")) + _n(usage.get("cache_creation_input_tokens")) \
                    + _n(usage.get("cache_read_input_tokens"))
                u.cached_tokens += _n(usage.get("cache_read_input_tokens"))
                u.output_tokens += _n(usage.get("output_tokens"))
        elif kind == "user":
            for b in message.get("content") or []:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    self.tool_result(b.get("tool_use_id"), b.get("content"))
        elif kind == "result":
            self.final = {"subtype": str(e.get("subtype", ""))[:100], "is_error": bool(e.get("is_error")),
                          "num_turns": _n(e.get("num_turns")), "result": _text(e.get("result"))[:2000]}
            per_model = e.get("modelUsage")
            if isinstance(per_model, dict) and per_model:  # the CLI's own totals replace the running sums
                requests = {m: u.requests for m, u in self.usage.items()}  # modelUsage has no request count
                self.usage = {}
                for model, m in list(per_model.items())[:50]:
                    if isinstance(m, dict):
                        u = self.model_usage(model)
                        cache_read = _n(m.get("cacheReadInputTokens"))
                        u.input_tokens = _n(m.get("inputTokens")) + _n(m.get("cacheCreationInputTokens")) + cache_read
                        u.cached_tokens = cache_read
                        u.output_tokens = _n(m.get("outputTokens"))
                        u.cost_usd = _usd(m.get("costUSD"))
                        u.requests = requests.get(str(model)[:200], 0)
                if len(self.usage) == 1 and not any(u.requests for u in self.usage.values()):
                    next(iter(self.usage.values())).requests = sum(requests.values())  # named otherwise in replies
            total = _usd(e.get("total_cost_usd"))
            if total is not None and all(u.cost_usd is None for u in self.usage.values()):
                self.model_usage().cost_usd = total


class CodexStream(StreamParser):
    """`codex exec --json`: thread and turn events; items (agent_message, reasoning,
    command_execution, file_change, ...) when completed; each turn.completed carries its usage."""

    def handle_event(self, e: dict[str, Any]) -> None:
        kind = e.get("type")
        if kind == "item.completed" and isinstance(e.get("item"), dict):
            item = e["item"]
            itype, iid = item.get("type"), item.get("id", "")
            if itype == "agent_message":
                self.reply(_text(item.get("text")))
            elif itype == "command_execution":
                self.reply("", [_call(iid, "exec", {"command": item.get("command")})])
                self.tool_result(iid, {"exit_code": item.get("exit_code"), "output": _text(item.get("aggregated_output"))},
                                 "exec")
            elif itype in ("file_change", "mcp_tool_call", "web_search"):
                self.reply("", [_call(iid, itype, {k: v for k, v in item.items() if k not in ("id", "type")})])
        elif kind == "turn.completed" and isinstance(e.get("usage"), dict):
            usage, u = e["usage"], self.model_usage()
            u.requests += 1
            u.input_tokens += _n(usage.get("input_tokens"))
            u.cached_tokens += _n(usage.get("cached_input_tokens"))
            u.output_tokens += _n(usage.get("output_tokens"))
        elif kind in ("turn.failed", "error"):
            err = e.get("error") if isinstance(e.get("error"), dict) else e
            self.final = {"is_error": True, "result": _text(err.get("message"))[:2000]}


class GeminiStream(StreamParser):
    """`gemini -p --output-format stream-json`: init, message (assistant text in deltas), tool_use,
    tool_result, and a closing `result` whose `stats` count the tokens."""

    _pending: str = ""

    def _flush(self) -> None:
        if self._pending:
            self.reply(self._pending)
            self._pending = ""

    def handle_event(self, e: dict[str, Any]) -> None:
        kind = e.get("type")
        if kind == "init" and isinstance(e.get("model"), str):
            self.default_model = e["model"][:200]
        elif kind == "message" and e.get("role") == "assistant":
            self._pending = (self._pending + _text(e.get("content")))[:MAX_TEXT]
        elif kind == "tool_use":
            text, self._pending = self._pending, ""
            self.reply(text, [_call(e.get("tool_id"), e.get("tool_name"), e.get("parameters"))])
        elif kind == "tool_result":
            self._flush()
            self.tool_result(e.get("tool_id"), e.get("output") if "output" in e else e.get("error"))
        elif kind == "result":
            self._flush()
            stats = e.get("stats") if isinstance(e.get("stats"), dict) else {}
            u = self.model_usage()
            u.requests = max(u.requests, 1)
            u.input_tokens = _n(stats.get("input_tokens"))
            u.output_tokens = _n(stats.get("output_tokens"))
            u.cached_tokens = _n(stats.get("cached"))
            self.final = {"is_error": e.get("status") != "success", "result": str(e.get("status", ""))[:100]}


class OpenCodeStream(StreamParser):
    """`opencode run --format json`: step_start, text, tool_use (with its state's input and output)
    and step_finish, whose part carries the step's tokens and cost."""

    def handle_event(self, e: dict[str, Any]) -> None:
        kind = e.get("type")
        part = e.get("part") if isinstance(e.get("part"), dict) else {}
        if kind == "text":
            self.reply(_text(part.get("text")))
        elif kind == "tool_use":
            state = part.get("state") if isinstance(part.get("state"), dict) else {}
            call_id = part.get("callID") or part.get("id")
            self.reply("", [_call(call_id, part.get("tool"), state.get("input"))])
            self.tool_result(call_id, state.get("output") if "output" in state else state.get("error"),
                             str(part.get("tool", "")))
        elif kind == "step_finish":
            tokens = part.get("tokens") if isinstance(part.get("tokens"), dict) else {}
            cache = tokens.get("cache") if isinstance(tokens.get("cache"), dict) else {}
            u = self.model_usage()
            u.requests += 1
            u.input_tokens += _n(tokens.get("input")) + _n(cache.get("read")) + _n(cache.get("write"))
            u.cached_tokens += _n(cache.get("read"))
            u.output_tokens += _n(tokens.get("output")) + _n(tokens.get("reasoning"))
            cost = _usd(part.get("cost"))
            if cost is not None:
                u.cost_usd = (u.cost_usd or 0.0) + cost
        elif kind == "error":
            err = e.get("error") if isinstance(e.get("error"), dict) else {}
            self.final = {"is_error": True, "result": _text(err.get("data") or err.get("name"))[:2000]}


_AIDER_FIELD = re.compile(r"([\d.]+)([kM]?) (sent|received|cache write|cache hit)")
_AIDER_COST = re.compile(r"Cost: \$([\d.]+) message")


def _count(number: str, suffix: str) -> int:
    return int(float(number) * {"": 1, "k": 1_000, "M": 1_000_000}[suffix])


class AiderText(StreamParser):
    """Aider's plain output (`--no-pretty`): its replies as text, and after each one a line
    `Tokens: 2.1k sent, 245 received. Cost: $0.01 message, $0.02 session.`"""

    _lines: list[str]

    def __post_init__(self) -> None:
        self._lines = []  # the reply so far, until its Tokens line

    def handle(self, line: str) -> None:
        if not line.startswith("Tokens:"):
            if len(self._lines) < 2000:
                self._lines.append(line)
            return
        counts = {kind: _count(number, suffix) for number, suffix, kind in _AIDER_FIELD.findall(line)}
        if self._lines:
            self.reply("\n".join(self._lines))
            self._lines = []
        u = self.model_usage()
        u.requests += 1
        u.input_tokens += counts.get("sent", 0)
        u.cached_tokens += counts.get("cache hit", 0)
        u.output_tokens += counts.get("received", 0)
        if cost := _AIDER_COST.search(line):
            u.cost_usd = (u.cost_usd or 0.0) + float(cost.group(1))

    def close(self) -> None:
        if self._lines:
            self.reply("\n".join(self._lines))
            self._lines = []


PARSERS: dict[str, Callable[[str], StreamParser]] = {
    "claude-stream-json": ClaudeStream,
    "codex-json": CodexStream,
    "gemini-stream-json": GeminiStream,
    "opencode-json": OpenCodeStream,
    "aider-text": AiderText,
}


def parser_for(stream: str, default_model: str) -> StreamParser:
    return PARSERS[stream](default_model)
