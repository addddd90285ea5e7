"""`react` retries only what a retry can cure, waits as long as the server asks, and stops at once
on a request that will never succeed; through the real `openai` and `anthropic` clients against a
local server (tests/scripted_llm.py)."""

from __future__ import annotations

import time

import pytest

from rlbench.agents.react import ReactAgent, ReactConfig, api_failure
from scripted_llm import ScriptedLLM


class Log:
    """The ToolBox parts `_request` uses: its event log and the budget left."""

    def __init__(self, remaining: float = 1e9):
        self.events: list[dict] = []
        self._remaining = remaining

    def log_event(self, event: dict) -> None:
        self.events.append(event)

    def remaining(self) -> float:
        return self._remaining


def _request(llm: ScriptedLLM, provider: str = "openai", remaining: float = 1e9, **options):
    cfg = ReactConfig(provider=provider, model="scripted", backoff_s=0.05, retries=3, request_timeout_s=5,
                      **options)
    if provider == "anthropic":
        from anthropic import Anthropic

        client = Anthropic(api_key="k", base_url=llm.base_url[: -len("/v1")], max_retries=0, timeout=5)
    else:
        from openai import OpenAI

        client = OpenAI(api_key="k", base_url=llm.base_url, max_retries=0, timeout=5)
    log = Log(remaining)
    started = time.monotonic()
    reply = ReactAgent()._request(client, cfg, [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
                                  log, 1)
    return reply, log.events, time.monotonic() - started


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
def test_a_request_the_api_refuses_is_not_retried_and_says_why(provider, status):
    with ScriptedLLM([{"status": status}, {"tool": ("status", "{}")}]) as llm:
        reply, events, _ = _request(llm, provider)
    assert reply is None and len(llm.requests) == 1  # one request, no retry
    error, stop = events
    assert error["event"] == "api_error" and error["status"] == status and not error["retryable"], error
    assert stop["event"] == "stop" and f"API refused the request ({status}" in stop["why"], stop
    assert "OPENAI_API_KEY" in stop["why"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
def test_throttling_and_server_errors_are_retried_after_the_servers_retry_after(provider):
    script = [{"status": 429, "headers": {"retry-after": "0.6"}}, {"status": 503},
              {"status": 529, "headers": {"retry-after-ms": "300"}}, {"tool": ("status", "{}")}]
    with ScriptedLLM(script) as llm:
        reply, events, seconds = _request(llm, provider)
    assert reply is not None and reply.tool_calls[0].name == "status"
    waits = [e["retry_in_s"] for e in events]
    assert [e["status"] for e in events] == [429, 503, 529] and waits == [0.6, 0.1, 0.3], events
    assert seconds >= 1.0 and len(llm.requests) == 4


def test_a_lost_connection_is_retried_and_a_retry_after_past_the_budget_stops():
    from openai import OpenAI

    client = OpenAI(api_key="k", base_url="http://127.0.0.1:9/v1", max_retries=0, timeout=2)  # nothing listens
    log = Log()
    cfg = ReactConfig(model="scripted", backoff_s=0.01, retries=2)
    assert ReactAgent()._request(client, cfg, [{"role": "user", "content": "u"}], log, 1) is None
    errors = [e for e in log.events if e["event"] == "api_error"]
    assert len(errors) == 3 and all(e["status"] is None and e["retryable"] for e in errors), errors
    assert log.events[-1]["why"] == "API failed 3 times in a row"

    with ScriptedLLM([{"status": 429, "headers": {"retry-after": "60"}}]) as llm:
        reply, events, seconds = _request(llm, remaining=30)
    assert reply is None and len(llm.requests) == 1 and seconds < 10
    assert events[0]["retryable"] and events[0]["retry_in_s"] is None
    assert "next retry in 60 s is past the budget left" in events[-1]["why"]


def test_retry_after_as_an_http_date_and_unreadable_headers():
    import email.utils

    import httpx
    import openai

    def err(status: int, headers: dict) -> openai.APIStatusError:
        response = httpx.Response(status, headers=headers, request=httpx.Request("POST", "http://x/v1/chat/completions"))
        return openai.APIStatusError("e", response=response, body=None)

    when = email.utils.formatdate(time.time() + 20, usegmt=True)
    assert 15 <= api_failure(err(429, {"retry-after": when})).retry_after_s <= 21
    assert api_failure(err(429, {"retry-after": "soon"})).retry_after_s is None
    assert api_failure(err(500, {})).retryable and not api_failure(err(401, {})).retryable
    assert api_failure(err(408, {})).retryable and api_failure(err(409, {})).retryable
    assert not api_failure(ValueError("not an API error")).retryable
