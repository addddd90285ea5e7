"""`react`: a tool-calling LLM agent over the harness tools, for any OpenAI-compatible endpoint
(`provider=openai`, the `openai` client) or Anthropic's Messages API (`provider=anthropic`, the
`anthropic` client). The conversation is kept in OpenAI's shape and translated per request.

The model sees the task description and every harness tool (rlbench/harness/tool_registry.py:
exec, python, read, write, submit, sweep, claim, status; the grading server refuses a sweep where
the task allows none) plus `finish`. Every request and reply goes to the cell's
conversation.jsonl; API errors that a retry can cure (429, 408, 409, 5xx, timeouts, lost
connections) are retried with exponential backoff or after the server's `Retry-After`, the rest
(400, 401, 403, 404, 422: a bad key or request stays bad) stop the agent at once; every error is
recorded with its status; malformed tool
calls, unknown tools and bad arguments are answered with an error the model can read, and
recorded; tool results are cut to `max_tool_result_chars`; when the conversation grows past
`max_context_chars` the oldest turns are replaced by a summary of the tool calls they made. A
token budget (and an optional cost budget) per cell stops the loop. Config comes from
`agent_options` (`agent_options.model=...`); the key is read from the environment variable
`api_key_env`. With `driver=vllm:MODEL` the endpoint is an open model that the run serves itself
with vLLM's OpenAI server (rlbench/agents/model_server.py): no API, no key.
"""

from __future__ import annotations

import inspect
import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from rlbench.agents.base import Agent
from rlbench.config.core import check, load_config
from rlbench.harness.tool_registry import names
from rlbench.harness.tools import TOOL_SPECS

if TYPE_CHECKING:
    from rlbench.harness.tools import ToolBox

SYSTEM = """You are an RL engineer working alone in a sandboxed workspace with no network. Improve the
base model on the task described by the user, within the budget, using the tools. Submit checkpoint
folders with `submit` (you get the dev score back); the harness grades your best submission on
hidden splits after you call `finish`. Keep tool calls purposeful; read logs when a run fails."""


FINISH = {"type": "function", "function": {
    "name": "finish", "description": "End the run (the harness then grades your best submission).",
    "parameters": {"type": "object", "properties": {"summary": {"type": "string"}}, "required": []}}}
# the harness's tools as rlbench/harness/tool_registry.py derives them from the ToolBox, plus `finish`,
# which only this agent has (it ends the loop; nothing is recorded)
FUNCTIONS = [spec.openai() for spec in TOOL_SPECS] + [FINISH]
TOOLS = frozenset(names(TOOL_SPECS))
ANTHROPIC_TOOLS = [{"name": t["function"]["name"], "description": t["function"]["description"],
                    "input_schema": t["function"]["parameters"]} for t in FUNCTIONS]


@dataclass
class Call:
    id: str
    name: str
    arguments: str  # JSON text, as the model wrote it (maybe malformed)


@dataclass
class Reply:
    """One model reply, whichever API it came from."""

    text: str
    tool_calls: list[Call]
    finish_reason: str  # stop | tool_calls | length
    prompt_tokens: int = 0
    completion_tokens: int = 0


def from_openai(resp: Any) -> Reply:
    choice = resp.choices[0]
    usage = getattr(resp, "usage", None)
    calls = [Call(c.id, c.function.name, c.function.arguments) for c in (choice.message.tool_calls or [])]
    return Reply(choice.message.content or "", calls, choice.finish_reason or "stop",
                 getattr(usage, "prompt_tokens", 0) or 0, getattr(usage, "completion_tokens", 0) or 0)


def from_anthropic(resp: Any) -> Reply:
    text = "".join(b.text for b in resp.content if b.type == "text")
    calls = [Call(b.id, b.name, json.dumps(b.input)) for b in resp.content if b.type == "tool_use"]
    finish = {"max_tokens": "length", "tool_use": "tool_calls"}.get(resp.stop_reason or "", "stop")
    return Reply(text, calls, finish, resp.usage.input_tokens or 0, resp.usage.output_tokens or 0)


def to_anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """OpenAI-shaped history -> (system, Messages API turns): tool calls become tool_use blocks,
    tool results become tool_result blocks in the next user turn, consecutive user turns merge."""
    system = "\n\n".join(m["content"] for m in messages if m["role"] == "system")
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        if m["role"] == "user":
            add("user", [{"type": "text", "text": m["content"]}])
        elif m["role"] == "tool":
            add("user", [{"type": "tool_result", "tool_use_id": m["tool_call_id"], "content": m["content"]}])
        elif m["role"] == "assistant":
            blocks: list[dict[str, Any]] = [{"type": "text", "text": m["content"]}] if m.get("content") else []
            for c in m.get("tool_calls", []):
                try:
                    args = json.loads(c["function"]["arguments"] or "{}")
                except json.JSONDecodeError:
                    args = {"unparsed_arguments": c["function"]["arguments"]}
                blocks.append({"type": "tool_use", "id": c["id"], "name": c["function"]["name"],
                               "input": args if isinstance(args, dict) else {"value": args}})
            add("assistant", blocks or [{"type": "text", "text": "(no text)"}])
    return system, out


RETRYABLE_STATUS = frozenset({408, 409, 429})  # and every 5xx (529: Anthropic overloaded)
MAX_RETRY_AFTER_S = 300.0  # a server's Retry-After is honoured up to this; longer waits stop the agent


@dataclass(frozen=True)
class ApiFailure:
    """What an API error means for the loop: retry or stop, and how long the server asked to wait."""

    retryable: bool
    status: int | None  # the HTTP status; None: no response (timeout, lost connection)
    retry_after_s: float | None  # the server's Retry-After (retry-after-ms, retry-after), if any
    kind: str  # the error's class name


def api_failure(exc: BaseException) -> ApiFailure:
    """Classify an `openai` or `anthropic` client error (both clients share these shapes: a
    status error carries `status_code` and the httpx `response`; connection errors and timeouts
    carry neither). An error of neither shape is not retried."""
    kind = type(exc).__name__
    response = getattr(exc, "response", None)
    status = getattr(exc, "status_code", None)
    if status is None:
        connection = any(c.__name__ in ("APIConnectionError", "APITimeoutError") for c in type(exc).__mro__)
        return ApiFailure(connection, None, None, kind)
    return ApiFailure(status in RETRYABLE_STATUS or status >= 500, int(status), _retry_after(response), kind)


def _retry_after(response: Any) -> float | None:
    """Seconds from `retry-after-ms` or `retry-after` (seconds or an HTTP date); None if absent or unreadable."""
    headers = getattr(response, "headers", None) or {}
    try:
        if headers.get("retry-after-ms") is not None:
            return max(0.0, float(headers["retry-after-ms"]) / 1000)
        value = headers.get("retry-after")
        if value is None:
            return None
        try:
            return max(0.0, float(value))
        except ValueError:
            from email.utils import parsedate_to_datetime

            return max(0.0, parsedate_to_datetime(value).timestamp() - time.time())
    except (TypeError, ValueError, OverflowError):
        return None


@dataclass
class ReactConfig:
    provider: str = "openai"  # openai: any OpenAI-compatible chat-completions endpoint | anthropic
    model: str = ""
    base_url: str = ""  # empty: the client's default
    api_key_env: str = "OPENAI_API_KEY"
    temperature: float = 0.0
    max_output_tokens: int = 4096
    max_turns: int = 200
    max_tokens_total: int = 2_000_000  # prompt + completion tokens per cell
    usd_per_1m_input: float = 0.0
    usd_per_1m_output: float = 0.0
    max_cost_usd: float = 0.0  # 0: no cost limit
    max_tool_result_chars: int = 6000
    max_context_chars: int = 120_000
    keep_recent_messages: int = 12
    retries: int = 4
    backoff_s: float = 1.0
    request_timeout_s: float = 300.0
    max_nudges: int = 2  # replies without a tool call before the agent stops
    seed: int = 0
    tool_choice: str = "auto"  # auto | required (every reply calls a tool) | none | one tool's name
    driver: str = ""  # vllm:MODEL: an open model served by vLLM for this run (rlbench/agents/model_server.py)
    driver_options: dict[str, Any] = field(default_factory=dict)  # DriverServer's fields

    def validate(self) -> None:
        check(self.provider in ("openai", "anthropic"), "agent_options.provider", self.provider, "openai, anthropic")
        check(bool(self.model) or bool(self.driver), "agent_options.model", self.model,
              "the model name the endpoint serves (or driver=vllm:MODEL)")
        check(not self.driver or (self.provider == "openai" and not self.base_url), "agent_options.driver",
              self.driver, "no provider=anthropic or base_url with it: the driver's server is the endpoint")
        check(self.tool_choice in ("auto", "required", "none") or self.tool_choice in TOOLS | {"finish"},
              "agent_options.tool_choice", self.tool_choice, "auto, required, none or a tool's name")
        check(self.max_tool_result_chars >= 200, "agent_options.max_tool_result_chars", self.max_tool_result_chars, ">= 200")


class ReactAgent(Agent):
    name = "react"

    def run(self, description: str, tools: ToolBox) -> None:
        cfg = load_config(ReactConfig, dict(self.options), source_name="agent_options")
        key = os.environ.get(cfg.api_key_env) or "none"
        if cfg.driver:  # the run's own server (started before the cell's clock; found here by name)
            from rlbench.agents.model_server import ensure_driver

            served = ensure_driver(self.name, dict(self.options))
            assert served is not None
            cfg.base_url, cfg.model, key = served.base_url, cfg.model or served.model, "none"
            tools.log_event({"event": "driver", "model": served.model, "base_url": served.base_url,
                             "folder": served.folder, "device": served.device})
        if cfg.provider == "anthropic":
            from anthropic import Anthropic

            client: Any = Anthropic(api_key=key, base_url=cfg.base_url or None, max_retries=0,
                                    timeout=cfg.request_timeout_s)
        else:
            from openai import OpenAI

            client = OpenAI(api_key=key, base_url=cfg.base_url or None, max_retries=0, timeout=cfg.request_timeout_s)
        messages: list[dict[str, Any]] = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": description}]
        used = {"prompt": 0, "completion": 0}
        calls: Counter = Counter()
        nudges = 0
        for turn in range(1, cfg.max_turns + 1):
            if tools.remaining() <= 0:
                tools.log_event({"event": "stop", "why": "budget spent"})
                return
            self._compact(messages, cfg, calls, tools)
            reply = self._request(client, cfg, messages, tools, turn)
            if reply is None:
                return
            used["prompt"] += reply.prompt_tokens
            used["completion"] += reply.completion_tokens
            priced = cfg.usd_per_1m_input or cfg.usd_per_1m_output
            tools.record_usage({cfg.model: {
                "input_tokens": used["prompt"], "output_tokens": used["completion"], "cached_tokens": 0,
                "requests": turn, "cost_usd": round((used["prompt"] * cfg.usd_per_1m_input
                                                     + used["completion"] * cfg.usd_per_1m_output) / 1e6, 6)
                if priced else None}})
            tool_calls = reply.tool_calls
            assistant: dict[str, Any] = {"role": "assistant", "content": reply.text}
            if tool_calls:
                assistant["tool_calls"] = [{"id": c.id, "type": "function",
                                            "function": {"name": c.name, "arguments": c.arguments}} for c in tool_calls]
            messages.append(assistant)
            tools.log_event({"event": "reply", "turn": turn, "message": assistant, "finish_reason": reply.finish_reason,
                             "tokens": dict(used)})
            if reply.finish_reason == "length":
                tools.log_event({"event": "over_long_output", "turn": turn})
            if self._over_budget(cfg, used, tools):
                return
            if not tool_calls:
                nudges += 1
                if nudges > cfg.max_nudges:
                    tools.log_event({"event": "stop", "why": "no tool call in the last replies"})
                    return
                cut = " Your last reply was cut at the output limit; be shorter." if reply.finish_reason == "length" else ""
                messages.append({"role": "user", "content": "Use a tool, or call finish when you are done." + cut})
                continue
            nudges = 0
            finished = False
            for call in tool_calls:
                result = self._dispatch(call, tools, calls, turn)
                if call.name == "finish" and result.get("ok"):
                    finished = True
                text = json.dumps(result)
                if len(text) > cfg.max_tool_result_chars:
                    half = cfg.max_tool_result_chars // 2
                    text = text[:half] + f" ...[{len(text) - 2 * half} chars cut]... " + text[-half:]
                    tools.log_event({"event": "tool_result_cut", "turn": turn, "tool": call.name})
                messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            if finished:
                tools.log_event({"event": "stop", "why": "finish", "tokens": dict(used)})
                return
        tools.log_event({"event": "stop", "why": f"max_turns={cfg.max_turns}"})

    # pieces --------------------------------------------------------------------------------------
    def _request(self, client: Any, cfg: ReactConfig, messages: list[dict[str, Any]], tools: Any,
                 turn: int) -> "Reply | None":
        if cfg.provider == "anthropic":
            import anthropic

            api_error: Any = anthropic.APIError
        else:
            import openai

            api_error = openai.APIError
        for attempt in range(cfg.retries + 1):
            try:
                if cfg.provider == "anthropic":
                    system, converted = to_anthropic(messages)
                    kwargs: dict[str, Any] = {}
                    if "temperature" in inspect.signature(client.messages.create).parameters:
                        kwargs["temperature"] = cfg.temperature  # newer clients no longer take it
                    choice = {"auto": {"type": "auto"}, "required": {"type": "any"}, "none": {"type": "none"}}.get(
                        cfg.tool_choice, {"type": "tool", "name": cfg.tool_choice})
                    return from_anthropic(client.messages.create(
                        model=cfg.model, system=system, messages=converted, tools=ANTHROPIC_TOOLS,
                        max_tokens=cfg.max_output_tokens, tool_choice=choice, **kwargs))
                choice: Any = cfg.tool_choice if cfg.tool_choice in ("auto", "required", "none") else \
                    {"type": "function", "function": {"name": cfg.tool_choice}}
                return from_openai(client.chat.completions.create(
                    model=cfg.model, messages=messages, tools=FUNCTIONS, temperature=cfg.temperature,
                    max_tokens=cfg.max_output_tokens, seed=cfg.seed, tool_choice=choice))
            except api_error as exc:
                failure = api_failure(exc)
                wait = failure.retry_after_s if failure.retry_after_s is not None else cfg.backoff_s * 2 ** attempt
                retry = failure.retryable and attempt < cfg.retries and wait <= MAX_RETRY_AFTER_S \
                    and wait < tools.remaining()
                tools.log_event({"event": "api_error", "turn": turn, "attempt": attempt + 1, "status": failure.status,
                                 "error": f"{failure.kind}: {str(exc)[:500]}", "retryable": failure.retryable,
                                 "retry_in_s": round(wait, 3) if retry else None})
                if not failure.retryable:
                    tools.log_event({"event": "stop", "why": f"API refused the request ({failure.status} "
                                     f"{failure.kind}); not retried: check agent_options (model, base_url) and the "
                                     f"key in ${cfg.api_key_env}"})
                    return None
                if not retry:
                    break
                time.sleep(wait)
        tools.log_event({"event": "stop", "why": f"API failed {attempt + 1} times in a row"
                                                 + ("" if attempt >= cfg.retries else
                                                    f"; the server's next retry in {wait:.0f} s is past the budget "
                                                    f"left or the {MAX_RETRY_AFTER_S:.0f}-s cap")})
        return None

    def _dispatch(self, call: "Call", tools: Any, calls: Counter, turn: int) -> dict[str, Any]:
        name = call.name
        try:
            args = json.loads(call.arguments or "{}")
            if not isinstance(args, dict):
                raise ValueError("arguments must be a JSON object")
        except (json.JSONDecodeError, ValueError) as exc:
            tools.log_event({"event": "malformed_tool_call", "turn": turn, "tool": name,
                             "arguments": (call.arguments or "")[:500], "error": str(exc)})
            return {"ok": False, "error": f"malformed arguments for {name}: {exc}; send a JSON object"}
        if name == "finish":
            return {"ok": True}
        if name not in TOOLS:
            tools.log_event({"event": "unknown_tool", "turn": turn, "tool": name})
            return {"ok": False, "error": f"unknown tool {name!r}; tools: {', '.join(sorted(TOOLS))}, finish"}
        calls[name] += 1
        try:
            result = getattr(tools, name)(**args)
        except TypeError as exc:
            tools.log_event({"event": "bad_arguments", "turn": turn, "tool": name, "error": str(exc)})
            return {"ok": False, "error": f"bad arguments for {name}: {exc}"}
        if not result.get("ok"):
            calls[f"{name}_failed"] += 1
        return result

    def _compact(self, messages: list[dict[str, Any]], cfg: ReactConfig, calls: Counter, tools: Any) -> None:
        """Past the context limit, replace the oldest turns (never splitting a tool call from its
        result) with one note of what they did."""
        size = sum(len(json.dumps(m)) for m in messages)
        if size <= cfg.max_context_chars or len(messages) <= cfg.keep_recent_messages + 2:
            return
        cut = len(messages) - cfg.keep_recent_messages
        while cut < len(messages) and messages[cut]["role"] == "tool":
            cut += 1
        dropped = messages[2:cut]
        if not dropped:
            return
        done = ", ".join(f"{k} x{v}" for k, v in sorted(calls.items()))
        note = {"role": "user", "content": f"[{len(dropped)} earlier messages were removed to fit the context. "
                                           f"Tool calls so far: {done or 'none'}. Use status and read to recover "
                                           "anything you need.]"}
        messages[2:cut] = [note]
        tools.log_event({"event": "compacted", "dropped_messages": len(dropped), "chars_before": size})

    def _over_budget(self, cfg: ReactConfig, used: dict[str, int], tools: Any) -> bool:
        total = used["prompt"] + used["completion"]
        cost = used["prompt"] * cfg.usd_per_1m_input / 1e6 + used["completion"] * cfg.usd_per_1m_output / 1e6
        if total > cfg.max_tokens_total or (cfg.max_cost_usd and cost > cfg.max_cost_usd):
            tools.log_event({"event": "stop", "why": "token or cost budget spent", "tokens": total, "usd": round(cost, 4)})
            return True
        return False
