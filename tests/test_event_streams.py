"""The CLI event-stream parsers on streams the real CLIs printed (tests/data/cli_streams: Claude
Code 2.1.197, Codex 0.171.0, Gemini CLI 0.61.0, OpenCode 1.18.33, Aider 0.86.2, each run as the
sandbox runs it against a local API server that told it to run `echo hello-from-tool` and counted
fixed tokens), and on hostile lines."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlbench.agents.event_streams import parser_for

STREAMS = Path(__file__).resolve().parent / "data" / "cli_streams"
FORMATS = {"claude": "claude-stream-json", "codex": "codex-json", "gemini": "gemini-stream-json",
           "opencode": "opencode-json", "aider": "aider-text"}


def parse(name: str):
    p = parser_for(FORMATS[name.split("-")[0]], "the-model")
    for line in (STREAMS / name).read_bytes().splitlines():
        p.feed(line)
    p.close()
    return p


@pytest.mark.parametrize("name, tokens, cached, cost, requests", [
    ("claude-stream.jsonl", (11000, 84), 8000, 0.01311, 2),
    ("claude-stream-multiblock.jsonl", (11000, 84), 8000, 0.01311, 2),  # one reply as several events
    ("opencode-run.jsonl", (11000, 84), 8000, 0.01311, 2),
    ("opencode-run-multiblock.jsonl", (11000, 84), 8000, 0.01311, 2),
    ("codex-exec.jsonl", (3000, 120), 2048, None, 1),  # codex and gemini report no cost
    ("gemini-stream.jsonl", (3000, 120), 2048, None, 1),
    ("aider-stdout.txt", (1500, 60), 0, 0.0031, 1),
    ("aider-anthropic-nostream.txt", (5800, 42), 4000, None, 1),  # the Cost on its own line: not counted
])
def test_real_streams_give_their_tokens_cost_and_tool_calls(name, tokens, cached, cost, requests):
    p = parse(name)
    total = p.totals()
    assert (total.input_tokens, total.output_tokens) == tokens and total.cached_tokens == cached
    assert total.requests == requests and p.skipped_lines == 0
    assert (total.cost_usd is None) if cost is None else abs(total.cost_usd - cost) < 1e-9
    if not name.startswith("aider"):  # aider runs no tool itself
        calls = [c for r in p.records if r["event"] == "reply" for c in r["message"].get("tool_calls", [])]
        results = [r for r in p.records if r["event"] == "tool_result"]
        assert len(calls) == 1 and "hello-from-tool" in calls[0]["function"]["arguments"], p.records
        assert len(results) == 1 and "hello-from-tool" in results[0]["content"]


@pytest.mark.parametrize("name", ["claude-stream-401.jsonl", "codex-exec-401.jsonl", "gemini-stream-401.jsonl",
                                  "opencode-run-401.jsonl"])
def test_a_refused_key_ends_as_an_error_the_cell_records(name):
    p = parse(name)
    assert p.final.get("is_error") is True, p.final
    assert p.totals().output_tokens == 0


def test_hostile_lines_are_skipped_and_counted():
    p = parser_for("claude-stream-json", "m")
    for line in [b"not json", b"[1, 2]", b"\xff\xfe", json.dumps({"type": "assistant", "message": "x"}).encode(),
                 json.dumps({"type": "assistant", "message": {"id": "a", "content": [{"type": "tool_use", "id": 1,
                             "name": "x" * 10_000, "input": {"k": "v" * 100_000}}],
                             "usage": {"input_tokens": -5, "output_tokens": float("inf")}}}).encode(),
                 b"{" * 2_000_000]:
        p.feed(line)
    p.close()
    assert p.skipped_lines >= 3
    reply = [r for r in p.records if r["event"] == "reply"][-1]
    call = reply["message"]["tool_calls"][0]
    assert len(call["function"]["name"]) == 200 and len(call["function"]["arguments"]) < 21_000
    assert p.totals().input_tokens == 0 and p.totals().output_tokens == 0  # negative and infinite counts refused


def test_a_flood_of_events_is_capped():
    """A stream of tiny events (a hostile or looping CLI) keeps MAX_RECORDS and counts the rest,
    while its usage is still summed."""
    from rlbench.agents.event_streams import MAX_RECORDS

    p = parser_for("opencode-json", "m")
    step = json.dumps({"type": "step_finish", "part": {"tokens": {"input": 1, "output": 1}}})
    text = json.dumps({"type": "text", "part": {"text": "x"}})
    for _ in range(MAX_RECORDS + 500):
        p.feed(text)
        p.feed(step)
    assert len(p.records) == MAX_RECORDS and p.dropped_records == 500
    assert p.totals().input_tokens == MAX_RECORDS + 500
