"""A real local HTTP server speaking OpenAI chat completions (POST .../chat/completions), OpenAI
responses (POST .../responses), Anthropic messages (POST .../v1/messages) and Gemini
(POST .../models/MODEL:generateContent), replaying a scripted conversation.

Each POST /v1/chat/completions takes the next script entry: {"status": 500} answers an error,
{"tool": (name, arguments_json)} answers a tool call, {"content": str, "finish_reason": ...}
answers text; an entry's "headers" go with its response ({"status": 429, "headers": {"retry-after":
"1"}}). Requests are kept (and their headers, in `headers`), so tests can check what the agent sent back
and which key reached the server. Every reply counts 100 input and 20 output tokens."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class ScriptedLLM:
    def __init__(self, script: list[dict[str, Any]]):
        self.script = list(script)
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                owner.requests.append(body)
                owner.headers.append({k.lower(): v for k, v in self.headers.items()})
                entry = owner.script.pop(0) if owner.script else {"tool": ("finish", "{}")}
                if "status" in entry:
                    payload, code = {"error": {"message": "scripted failure", "type": "server_error"}}, entry["status"]
                elif self.path.endswith("/messages"):
                    payload, code = owner._message(entry, len(owner.requests)), 200
                elif self.path.endswith("/responses"):
                    payload, code = owner._response(entry, len(owner.requests)), 200
                elif ":generateContent" in self.path:
                    payload, code = owner._gemini(entry), 200
                else:
                    payload, code = owner._completion(entry, len(owner.requests)), 200
                data = json.dumps(payload).encode()
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in entry.get("headers", {}).items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def _completion(self, entry: dict[str, Any], n: int) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": entry.get("content")}
        finish = entry.get("finish_reason", "stop")
        if "tool" in entry:
            name, args = entry["tool"]
            message["tool_calls"] = [{"id": f"call_{n}", "type": "function", "function": {"name": name, "arguments": args}}]
            finish = entry.get("finish_reason", "tool_calls")
        return {"id": f"chatcmpl-{n}", "object": "chat.completion", "created": 0, "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}

    def _message(self, entry: dict[str, Any], n: int) -> dict[str, Any]:
        content: list[dict[str, Any]] = [{"type": "text", "text": entry["content"]}] if entry.get("content") else []
        stop = {"length": "max_tokens"}.get(entry.get("finish_reason", ""), "end_turn")
        if "tool" in entry:
            name, args = entry["tool"]
            content.append({"type": "tool_use", "id": f"toolu_{n}", "name": name, "input": json.loads(args)})
            stop = "tool_use"
        return {"id": f"msg_{n}", "type": "message", "role": "assistant", "model": "scripted", "content": content,
                "stop_reason": stop, "stop_sequence": None, "usage": {"input_tokens": 100, "output_tokens": 20}}

    def _response(self, entry: dict[str, Any], n: int) -> dict[str, Any]:
        output: list[dict[str, Any]] = []
        if entry.get("content"):
            output.append({"type": "message", "id": f"msg_{n}", "role": "assistant", "status": "completed",
                           "content": [{"type": "output_text", "text": entry["content"], "annotations": []}]})
        if "tool" in entry:
            name, args = entry["tool"]
            output.append({"type": "function_call", "id": f"fc_{n}", "call_id": f"call_{n}", "name": name,
                           "arguments": args, "status": "completed"})
        return {"id": f"resp_{n}", "object": "response", "created_at": 0, "model": "scripted", "status": "completed",
                "output": output, "usage": {"input_tokens": 100, "input_tokens_details": {"cached_tokens": 0},
                                            "output_tokens": 20, "total_tokens": 120}}

    def _gemini(self, entry: dict[str, Any]) -> dict[str, Any]:
        parts: list[dict[str, Any]] = [{"text": entry["content"]}] if entry.get("content") else []
        if "tool" in entry:
            name, args = entry["tool"]
            parts.append({"functionCall": {"name": name, "args": json.loads(args)}})
        return {"candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
                "usageMetadata": {"promptTokenCount": 100, "candidatesTokenCount": 20, "totalTokenCount": 120},
                "modelVersion": "scripted"}

    def __enter__(self) -> "ScriptedLLM":
        self.thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self.server.shutdown()
        self.server.server_close()
