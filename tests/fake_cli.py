#!/usr/bin/env python3
"""A stand-in for a coding-agent CLI (claude, codex, gemini, opencode, aider), for tests.

Installed by the tests the way `rlbench agents install NAME --from FOLDER` installs the real one
(an npm package folder, or a pip project for aider), it takes the real CLI's non-interactive
flags, reads its key and base-URL variables, talks to its provider's wire protocol (Anthropic
messages, OpenAI responses or chat completions, Gemini generateContent) through HTTP(S)_PROXY like
the real one, runs the shell commands the model asks for, and prints its event stream in the real
CLI's format, usage included. What it does is whatever the (scripted) model says: one `bash` tool
with a `command` argument; a reply without a tool call ends the run. Stdlib only: it runs in the
sandbox from its read-only install folder.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import urllib.request
import uuid

PRICE_IN, PRICE_OUT = 3.0, 15.0  # USD per 1M tokens, what the fake reports as cost
BASH = {"name": "bash", "description": "Run a shell command in the working folder.",
        "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}}


def emit(event: dict) -> None:
    print(json.dumps(event), flush=True)


def post(url: str, body: dict, headers: dict) -> dict:
    req = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST",
                                 headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(req, timeout=60) as resp:  # urllib takes HTTP(S)_PROXY from the environment
        return json.load(resp)


def run_bash(command: str) -> tuple[int, str]:
    proc = subprocess.run(["bash", "-c", command], capture_output=True, text=True, timeout=600)
    return proc.returncode, (proc.stdout + proc.stderr)[-4000:]


def key(*names: str) -> str:
    for name in names:
        if os.environ.get(name):
            return os.environ[name]
    print(f"error: set {' or '.join(names)}", file=sys.stderr)
    sys.exit(1)


def claude(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="claude")
    p.add_argument("-p", "--print", dest="prompt", required=True)
    p.add_argument("--output-format", choices=["text", "json", "stream-json"], default="text")
    p.add_argument("--verbose", action="store_true")
    p.add_argument("--dangerously-skip-permissions", action="store_true")
    p.add_argument("--model", default="claude-sonnet-4-5")
    a = p.parse_args(argv)
    assert a.output_format == "stream-json" and a.verbose and a.dangerously_skip_permissions, argv
    api_key, base = key("ANTHROPIC_API_KEY"), os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com")
    session = str(uuid.uuid4())
    emit({"type": "system", "subtype": "init", "cwd": os.getcwd(), "session_id": session, "tools": ["Bash"],
          "model": a.model, "permissionMode": "bypassPermissions"})
    messages = [{"role": "user", "content": a.prompt}]
    tool = {"name": "bash", "description": BASH["description"], "input_schema": BASH["parameters"]}
    used = {"in": 0, "out": 0}
    turns, text = 0, ""
    while turns < 30:
        turns += 1
        msg = post(f"{base.rstrip('/')}/v1/messages", {"model": a.model, "max_tokens": 4096, "messages": messages,
                                                        "tools": [tool]},
                   {"x-api-key": api_key, "anthropic-version": "2023-06-01"})
        used["in"] += msg["usage"]["input_tokens"]
        used["out"] += msg["usage"]["output_tokens"]
        emit({"type": "assistant", "message": msg, "parent_tool_use_id": None, "session_id": session})
        messages.append({"role": "assistant", "content": msg["content"]})
        calls = [b for b in msg["content"] if b["type"] == "tool_use"]
        text = "".join(b.get("text", "") for b in msg["content"] if b["type"] == "text") or text
        if not calls:
            break
        results = []
        for c in calls:
            code, out = run_bash(c["input"]["command"])
            results.append({"tool_use_id": c["id"], "type": "tool_result", "content": out, "is_error": code != 0})
        messages.append({"role": "user", "content": results})
        emit({"type": "user", "message": {"role": "user", "content": results}, "parent_tool_use_id": None,
              "session_id": session})
    cost = (used["in"] * PRICE_IN + used["out"] * PRICE_OUT) / 1e6
    emit({"type": "result", "subtype": "success", "is_error": False, "duration_ms": 1, "num_turns": turns,
          "result": text, "session_id": session, "total_cost_usd": cost,
          "usage": {"input_tokens": used["in"], "output_tokens": used["out"], "cache_read_input_tokens": 0,
                    "cache_creation_input_tokens": 0},
          "modelUsage": {a.model: {"inputTokens": used["in"], "outputTokens": used["out"], "cacheReadInputTokens": 0,
                                   "cacheCreationInputTokens": 0, "costUSD": cost}}})


def codex(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="codex")
    p.add_argument("command", choices=["exec"])
    p.add_argument("--json", action="store_true")
    p.add_argument("--skip-git-repo-check", action="store_true")
    p.add_argument("--dangerously-bypass-approvals-and-sandbox", action="store_true")
    p.add_argument("--ephemeral", action="store_true")
    p.add_argument("--disable", action="append", default=[])
    p.add_argument("-c", "--config", action="append", default=[])
    p.add_argument("-m", "--model", default="gpt-5-codex")
    p.add_argument("prompt")
    a = p.parse_args(argv)
    assert a.json and a.dangerously_bypass_approvals_and_sandbox, argv
    config = {}
    for item in a.config:  # TOML values; a bare word is taken as a string, as codex does
        k, _, v = item.partition("=")
        config[k] = v[1:-1] if v.startswith('"') and v.endswith('"') else v
    provider = config.get("model_provider", "openai")
    if provider == "openai":  # the built-in provider: OPENAI_BASE_URL is ignored, only CODEX_API_KEY is sent
        api_key, base = key("CODEX_API_KEY"), config.get("openai_base_url", "https://api.openai.com/v1")
    else:
        api_key = key(config[f"model_providers.{provider}.env_key"])
        base = config[f"model_providers.{provider}.base_url"]
        assert config.get(f"model_providers.{provider}.wire_api", "responses") == "responses", config
    emit({"type": "thread.started", "thread_id": str(uuid.uuid4())})
    emit({"type": "turn.started"})
    items: list = [{"role": "user", "content": a.prompt}]
    usage = {"input_tokens": 0, "cached_input_tokens": 0, "output_tokens": 0}
    n = 0
    for _ in range(30):
        resp = post(f"{base.rstrip('/')}/responses", {"model": a.model, "input": items,
                                                      "tools": [{"type": "function", **BASH}]},
                    {"Authorization": f"Bearer {api_key}"})
        usage["input_tokens"] += resp["usage"]["input_tokens"]
        usage["output_tokens"] += resp["usage"]["output_tokens"]
        calls = [o for o in resp["output"] if o["type"] == "function_call"]
        for o in resp["output"]:
            if o["type"] == "message":
                n += 1
                emit({"type": "item.completed", "item": {"id": f"item_{n}", "type": "agent_message",
                                                         "text": "".join(c["text"] for c in o["content"])}})
        items += resp["output"]
        if not calls:
            break
        for c in calls:
            n += 1
            command = json.loads(c["arguments"])["command"]
            emit({"type": "item.started", "item": {"id": f"item_{n}", "type": "command_execution", "command": command,
                                                   "aggregated_output": "", "exit_code": None, "status": "in_progress"}})
            code, out = run_bash(command)
            emit({"type": "item.completed", "item": {"id": f"item_{n}", "type": "command_execution", "command": command,
                                                     "aggregated_output": out, "exit_code": code,
                                                     "status": "completed" if code == 0 else "failed"}})
            items.append({"type": "function_call_output", "call_id": c["call_id"], "output": out})
    emit({"type": "turn.completed", "usage": usage})


def gemini(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="gemini")
    p.add_argument("-p", "--prompt", required=True)
    p.add_argument("-o", "--output-format", choices=["text", "json", "stream-json"], default="text")
    p.add_argument("-y", "--yolo", action="store_true")
    p.add_argument("--skip-trust", action="store_true")
    p.add_argument("-m", "--model", default="auto")
    a = p.parse_args(argv)
    assert a.output_format == "stream-json" and a.yolo, argv
    if not a.skip_trust:  # headless in a folder it has not been told to trust
        sys.exit(55)
    api_key = key("GEMINI_API_KEY")
    base = os.environ.get("GOOGLE_GEMINI_BASE_URL", "https://generativelanguage.googleapis.com")
    if "GOOGLE_GEMINI_BASE_URL" in os.environ:  # 0.61 then picks a gateway auth it refuses, unless settings say otherwise
        settings = os.path.join(os.environ["HOME"], ".gemini", "settings.json")
        chosen = json.load(open(settings)).get("security", {}).get("auth", {}).get("selectedType") \
            if os.path.exists(settings) else None
        if chosen != "gemini-api-key":
            print("Invalid auth method selected.", file=sys.stderr)
            sys.exit(41)
    emit({"type": "init", "timestamp": "2026-01-01T00:00:00Z", "session_id": str(uuid.uuid4()), "model": a.model})
    emit({"type": "message", "timestamp": "2026-01-01T00:00:00Z", "role": "user", "content": a.prompt})
    contents = [{"role": "user", "parts": [{"text": a.prompt}]}]
    stats = {"input_tokens": 0, "output_tokens": 0, "tool_calls": 0}
    n = 0
    for _ in range(30):
        resp = post(f"{base.rstrip('/')}/v1beta/models/{a.model}:generateContent",
                    {"contents": contents, "tools": [{"functionDeclarations": [BASH]}]}, {"x-goog-api-key": api_key})
        stats["input_tokens"] += resp["usageMetadata"]["promptTokenCount"]
        stats["output_tokens"] += resp["usageMetadata"]["candidatesTokenCount"]
        parts = resp["candidates"][0]["content"]["parts"]
        contents.append({"role": "model", "parts": parts})
        calls = [x["functionCall"] for x in parts if "functionCall" in x]
        for x in parts:
            if "text" in x:
                emit({"type": "message", "timestamp": "2026-01-01T00:00:00Z", "role": "assistant", "content": x["text"],
                      "delta": True})
        if not calls:
            break
        answers = []
        for c in calls:
            n += 1
            stats["tool_calls"] += 1
            emit({"type": "tool_use", "timestamp": "2026-01-01T00:00:00Z", "tool_name": "run_shell_command",
                  "tool_id": f"tool_{n}", "parameters": c["args"]})
            code, out = run_bash(c["args"]["command"])
            emit({"type": "tool_result", "timestamp": "2026-01-01T00:00:00Z", "tool_id": f"tool_{n}",
                  "status": "success" if code == 0 else "error", "output": out})
            answers.append({"functionResponse": {"name": c["name"], "response": {"output": out}}})
        contents.append({"role": "user", "parts": answers})
    emit({"type": "result", "timestamp": "2026-01-01T00:00:00Z", "status": "success",
          "stats": {"total_tokens": stats["input_tokens"] + stats["output_tokens"], **stats, "duration_ms": 1}})


def opencode(argv: list[str]) -> None:
    p = argparse.ArgumentParser(prog="opencode")
    p.add_argument("command", choices=["run"])
    p.add_argument("--format", choices=["default", "json"], default="default")
    p.add_argument("--auto", action="store_true")
    p.add_argument("--title")
    p.add_argument("-m", "--model", required=True)
    p.add_argument("message", nargs="+")
    a = p.parse_args(argv)
    assert a.format == "json" and a.auto, argv
    provider, _, model = a.model.partition("/")
    assert provider == "anthropic", a.model
    api_key, base = key("ANTHROPIC_API_KEY"), os.environ.get("ANTHROPIC_BASE_URL", "https://api.anthropic.com/v1")
    session = "ses_" + uuid.uuid4().hex[:12]
    tool = {"name": "bash", "description": BASH["description"], "input_schema": BASH["parameters"]}
    messages = [{"role": "user", "content": " ".join(a.message)}]
    for _ in range(30):
        emit({"type": "step_start", "timestamp": 0, "sessionID": session, "part": {"type": "step-start"}})
        msg = post(f"{base.rstrip('/')}/messages", {"model": model, "max_tokens": 4096, "messages": messages,
                                                     "tools": [tool]},
                   {"x-api-key": api_key, "anthropic-version": "2023-06-01"})
        messages.append({"role": "assistant", "content": msg["content"]})
        results = []
        for b in msg["content"]:
            if b["type"] == "text":
                emit({"type": "text", "timestamp": 0, "sessionID": session, "part": {"type": "text", "text": b["text"]}})
            elif b["type"] == "tool_use":
                code, out = run_bash(b["input"]["command"])
                emit({"type": "tool_use", "timestamp": 0, "sessionID": session,
                      "part": {"type": "tool", "tool": "bash", "callID": b["id"],
                               "state": {"status": "completed", "input": b["input"], "output": out}}})
                results.append({"type": "tool_result", "tool_use_id": b["id"], "content": out})
        u = msg["usage"]
        emit({"type": "step_finish", "timestamp": 0, "sessionID": session,
              "part": {"type": "step-finish", "reason": "tool-calls" if results else "stop",
                       "cost": (u["input_tokens"] * PRICE_IN + u["output_tokens"] * PRICE_OUT) / 1e6,
                       "tokens": {"input": u["input_tokens"], "output": u["output_tokens"], "reasoning": 0,
                                  "cache": {"read": 0, "write": 0}}}})
        if not results:
            break
        messages.append({"role": "user", "content": results})


def aider(argv: list[str]) -> None:
    """Aider with --edit-format whole: a reply names a file on one line and gives its whole text in
    the fenced block after it. It runs no command the model suggests (--yes-always declines them);
    after edits it runs --test-cmd, and a failing run's output goes back to the model (at most 3
    reflections), as --auto-test does."""
    p = argparse.ArgumentParser(prog="aider")
    p.add_argument("--message", "-m", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--edit-format")
    p.add_argument("--test-cmd")
    for flag in ("--auto-test", "--yes-always", "--no-git", "--no-auto-commits", "--no-gitignore", "--no-check-update",
                 "--no-show-model-warnings", "--no-show-release-notes", "--analytics-disable", "--no-pretty",
                 "--no-fancy-input", "--no-stream"):
        p.add_argument(flag, action="store_true")
    p.add_argument("--chat-history-file")
    p.add_argument("--input-history-file")
    a = p.parse_args(argv)
    assert a.yes_always and a.no_pretty and a.edit_format == "whole", argv
    api_key = key("OPENAI_API_KEY")
    base = os.environ.get("OPENAI_API_BASE", "https://api.openai.com/v1")
    model = a.model.split("/", 1)[1] if a.model.startswith("openai/") else a.model
    messages = [{"role": "user", "content": a.message}]
    session = 0.0
    for _ in range(4):  # the message and up to 3 reflections
        resp = post(f"{base.rstrip('/')}/chat/completions", {"model": model, "messages": messages},
                    {"Authorization": f"Bearer {api_key}"})
        text = resp["choices"][0]["message"]["content"] or ""
        print(text, flush=True)
        u = resp["usage"]
        cost = (u["prompt_tokens"] * PRICE_IN + u["completion_tokens"] * PRICE_OUT) / 1e6
        session += cost
        print(f"Tokens: {u['prompt_tokens']} sent, {u['completion_tokens']} received. "
              f"Cost: ${cost:.4f} message, ${session:.4f} session.", flush=True)
        messages.append({"role": "assistant", "content": text})
        edited = []
        lines = text.split("\n")
        for i, line in enumerate(lines[:-1]):
            if lines[i + 1].startswith("```") and line.strip() and " " not in line.strip():
                end = next((j for j in range(i + 2, len(lines)) if lines[j].startswith("```")), len(lines))
                with open(line.strip(), "w") as f:
                    f.write("\n".join(lines[i + 2:end]) + "\n")
                edited.append(line.strip())
                print(f"Applied edit to {line.strip()}", flush=True)
        if not (edited and a.auto_test and a.test_cmd):
            break
        code, out = run_bash(a.test_cmd)
        print(out, flush=True)
        if code == 0:
            break
        messages.append({"role": "user", "content": out})


def main() -> None:
    {"claude": claude, "codex": codex, "gemini": gemini, "opencode": opencode, "aider": aider}[
        os.path.basename(sys.argv[0])](sys.argv[1:])


if __name__ == "__main__":
    main()
