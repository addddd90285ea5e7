"""`rlbench export`: a cell as an Inspect AI eval log, read back with Inspect's own reader."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log  # the format's own reader (a dev dependency: make setup installs it)

from rlbench.sandbox import bwrap_path

needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")


def _run_cell(tmp_path: Path, agent: str, **kw):
    from rlbench.harness.cell import CellConfig, run_cell

    return run_cell(CellConfig(agent=agent, task="arith-tiny", seed=0, results=str(tmp_path / "results"), grace_s=10,
                               **kw))


def _roles(sample) -> list[str]:
    return [m.role for m in sample.messages]


@needs_bwrap
def test_a_null_cell_exports_its_tool_calls_scores_and_timing(tmp_path, ray_cluster):
    from rlbench.reports.export import export_cell

    r = _run_cell(tmp_path, "null")
    assert r.status == "ok", r
    path = export_cell(Path(r.cell_dir), "inspect", tmp_path / "out")
    assert path == tmp_path / "out" / f"{r.cell}.eval"
    log = read_eval_log(str(path))
    assert log.status == "success" and log.eval.task == "rlbench/arith-tiny" and log.eval.solver == "null"
    assert log.eval.viewer.trust_content is False  # agent output is shown as plain text
    (sample,) = log.samples
    assert sample.id == r.cell and _roles(sample) == ["user", "assistant", "tool"]
    assert "A tiny task for tests." in sample.messages[0].text  # the workspace's description.md
    call = sample.messages[1].tool_calls[0]
    assert call.function == "submit" and call.arguments["path"] == "model"
    assert sample.messages[2].tool_call_id == call.id and json.loads(sample.messages[2].text)["ok"] is True
    assert sample.scores["test_pass_at_1"].value == r.scores["test"]["pass_at_1"]
    assert sample.scores["test_gain"].value == r.gains["test"].abs == 0
    assert sample.scores["heldout_gain"].metadata["ci_low"] == r.gains["heldout"].ci_low
    assert {s.name for s in log.results.scores} == set(sample.scores)
    assert sample.model_usage == {} and log.eval.model == "none"
    assert sample.started_at.startswith(r.started.removesuffix("Z")) and sample.total_time == r.cell_seconds
    assert [e.event for e in sample.events] == ["tool"] and sample.events[0].function == "submit"
    assert sample.metadata["rlbench"]["status"] == "ok"
    assert sample.metadata["rlbench_export"]["trajectory"] == {"present": True, "records": 1, "skipped_lines": 0,
                                                               "truncated": False}


@needs_bwrap
def test_a_react_cell_exports_its_conversation_paired_with_the_harness_records(tmp_path, ray_cluster):
    from scripted_llm import ScriptedLLM

    from rlbench.reports.export import export_cell

    script = [
        {"tool": ("status", "{}")},
        {"tool": ("exec", "{not json")},  # malformed: refused by the agent, no harness record
        {"tool": ("exec", json.dumps({"command": "echo hello"}))},
        {"content": "Now I submit.", "tool": ("submit", json.dumps({"path": "model"}))},
        {"tool": ("finish", json.dumps({"summary": "done"}))},
    ]
    with ScriptedLLM(script) as llm:
        r = _run_cell(tmp_path, "react", agent_options={"model": "scripted", "base_url": llm.base_url,
                                                        "backoff_s": 0.1})
    assert r.status == "ok", r
    path = export_cell(Path(r.cell_dir), "inspect", tmp_path / "react.json")  # the JSON flavour of the log
    log = read_eval_log(str(path))
    (sample,) = log.samples
    assert _roles(sample) == ["user"] + ["assistant", "tool"] * 5
    calls = [m.tool_calls[0] for m in sample.messages if m.role == "assistant"]
    assert [c.function for c in calls] == ["status", "exec", "exec", "submit", "finish"]
    assert calls[1].parse_error and calls[1].arguments == {} and calls[2].arguments == {"command": "echo hello"}
    tools = [m for m in sample.messages if m.role == "tool"]
    assert [t.tool_call_id for t in tools] == [c.id for c in calls]
    assert tools[1].error.type == "parsing" and "malformed_tool_call" in tools[1].text
    assert "hello" in json.loads(tools[2].text)["stdout"]  # the harness's record of that call
    assert json.loads(tools[3].text)["index"] == 1
    assert tools[4].text == "(the harness ran no tool for this call)"  # finish is the agent's own
    assert sample.messages[7].text == "Now I submit." and sample.messages[7].model == "scripted"
    # usage: 5 replies of 100 input and 20 output tokens
    usage = sample.model_usage["scripted"]
    assert (usage.input_tokens, usage.output_tokens, usage.total_tokens) == (500, 100, 600)
    assert log.stats.model_usage["scripted"] == usage and log.eval.model == "scripted"
    assert sample.scores["test_pass_at_1"].value == r.scores["test"]["pass_at_1"]
    assert sample.scores["heldout_gain"].value == r.gains["heldout"].abs
    assert sum(e.event == "tool" for e in sample.events) == 3  # status, exec, submit ran
    assert any(e.event == "info" and e.source == "rlbench/malformed_tool_call" for e in sample.events)
    assert sample.output.completion == "" and sample.output.choices[0].message.tool_calls[0].function == "finish"


# a cell folder made by hand: what a coding-agent CLI's stream leaves, and hostile files ------------

def _hand_cell(tmp_path: Path) -> Path:
    from rlbench.io import atomic_write_json

    cell = tmp_path / "cells" / "claude-code-arith-tiny-s0-x"
    (cell / "workspace").mkdir(parents=True)
    atomic_write_json(cell / "result.json", {
        "cell": cell.name, "agent": "claude-code", "task": "arith-tiny", "seed": 0, "status": "ok",
        "started": "2026-12-06T15:49:15Z", "finished": "2026-12-06T15:49:39Z", "cell_seconds": 24.3,
        "scores": {"test": {"pass_at_1": 0.25, "greedy": 0.3}, "heldout": {"pass_at_1": 0.2}},
        "baseline": {"test": {"pass_at_1": 0.2, "ci_low": 0.1, "ci_high": 0.3, "n": 120}},
        "gains": {"test": {"abs": 0.05, "ci_low": 0.01, "ci_high": 0.09, "significant": True},
                  "heldout": {"abs": -0.01, "ci_low": -0.05, "ci_high": 0.03}},
        "llm_usage": {"claude-sonnet-4-5": {"input_tokens": 400, "output_tokens": 80, "cached_tokens": 100,
                                            "requests": 4, "cost_usd": 0.0024}},
        "budget": {"wall_seconds": 300, "used_seconds": 1.8, "tool_calls": 2}})
    (cell / "workspace" / "description.md").write_text("# arith-tiny\nDo RL.\n")
    return cell


def _reply(step: int, call_id: str, command: str, text: str = "") -> dict:
    return {"step": step, "time": "2026-12-06T15:49:34Z", "event": "reply", "turn": step, "message": {
        "role": "assistant", "content": text, "tool_calls": [{"id": call_id, "type": "function", "function": {
            "name": "bash", "arguments": json.dumps({"command": command})}}]}}


def test_a_malformed_and_oversized_conversation_exports_what_is_readable_and_counts_the_rest(tmp_path):
    from rlbench.reports import export

    cell = _hand_cell(tmp_path)
    lines = [
        json.dumps(_reply(1, "toolu_1", "ls")),
        "{not json",  # malformed
        json.dumps(["a", "list"]),  # not an object
        "[" * 100_000,  # deeper than the JSON parser goes
        json.dumps({"event": "tool_result", "tool_call_id": "toolu_1", "content": "model\n\udc80data"}),
        json.dumps({"event": "reply", "message": {"role": "assistant", "content": "x" * (export.MAX_LINE_BYTES + 1)}}),
        json.dumps(_reply(3, "toolu_2", "./grade submit model", text="y" * (export.MAX_TEXT + 50))),
        json.dumps({"event": "tool_result", "tool_call_id": "toolu_2", "content": {"ok": True, "index": 1}}),
        json.dumps({"event": "reply", "message": {"role": "assistant", "content": "done", "tool_calls": "oops"}}),
        json.dumps({"event": "stop", "why": "claude-code finished", "time": "not a time"}),
        "",
    ]
    (cell / "conversation.jsonl").write_text("\n".join(lines))
    (cell / "trajectory.jsonl").write_bytes(b'{"step": 1, "tool": "exec", "args": {"command": "claude"}, "ok": true,'
                                            b' "result": {"ok": true}, "time": "2026-12-06T15:49:34Z"}\n\xff\xfe\n')
    path = export.export_cell(cell, "inspect", None)
    assert path == cell / "inspect" / f"{cell.name}.eval"
    (sample,) = read_eval_log(str(path)).samples
    assert sample.metadata["rlbench_export"]["conversation"] == {"present": True, "records": 6, "skipped_lines": 4,
                                                                 "truncated": False}
    assert sample.metadata["rlbench_export"]["trajectory"]["skipped_lines"] == 1
    assert _roles(sample) == ["user", "assistant", "tool", "assistant", "tool", "assistant"]
    assert sample.messages[0].text == "# arith-tiny\nDo RL."
    assert sample.messages[2].function == "bash" and sample.messages[2].text.startswith("model\n")
    assert "more characters not exported" in sample.messages[3].text and len(sample.messages[3].text) < 100_100
    assert json.loads(sample.messages[4].text) == {"ok": True, "index": 1}
    assert sample.messages[5].text == "done" and sample.messages[5].tool_calls is None
    # scores, usage and timing from result.json
    assert sample.scores["test_pass_at_1"].value == 0.25 and sample.scores["test_gain"].value == 0.05
    assert "significant" in sample.scores["test_gain"].explanation and sample.scores["heldout_gain"].value == -0.01
    assert sample.scores["test_pass_at_1"].metadata["baseline_pass_at_1"] == 0.2
    usage = sample.model_usage["claude-sonnet-4-5"]
    assert (usage.input_tokens, usage.input_tokens_cache_read, usage.total_tokens, usage.total_cost) == \
        (400, 100, 480, 0.0024)
    assert sample.total_time == 24.3 and sample.working_time == 1.8
    assert sample.started_at.startswith("2026-12-06T15:49:15") and sample.completed_at.startswith("2026-12-06T15:49:39")
    stop = next(e for e in sample.events if e.event == "info")
    assert stop.source == "rlbench/stop" and stop.data["why"] == "claude-code finished"


def test_caps_links_and_special_files_are_never_followed_or_blocked_on(tmp_path, monkeypatch):
    from rlbench.reports import export

    cell = _hand_cell(tmp_path)
    secret = tmp_path / "secret.txt"
    secret.write_text("TOP-SECRET")
    (cell / "workspace" / "description.md").unlink()
    (cell / "workspace" / "description.md").symlink_to(secret)
    os.mkfifo(cell / "trajectory.jsonl")  # a FIFO: opened non-blocking and refused
    (cell / "conversation.jsonl").write_text("".join(json.dumps(_reply(n, f"c{n}", "ls")) + "\n" for n in range(50)))
    monkeypatch.setattr(export, "JSONL_CAP", 3_000)  # cuts the file inside a line
    path = export.export_cell(cell, "inspect", tmp_path / "x.json")
    (sample,) = read_eval_log(str(path)).samples
    meta = sample.metadata["rlbench_export"]
    assert meta["conversation"]["truncated"] and meta["conversation"]["skipped_lines"] == 1
    assert 0 < meta["conversation"]["records"] < 50 and meta["trajectory"]["present"] is False
    assert meta["description"] == "task name" and "TOP-SECRET" not in path.read_text()
    monkeypatch.setattr(export, "MAX_LINES", 5)
    (sample,) = read_eval_log(str(export.export_cell(cell, "inspect", tmp_path / "y.eval"))).samples
    assert sample.metadata["rlbench_export"]["conversation"]["records"] == 5


def test_the_cli_exports_and_refuses_what_it_cannot_write(tmp_path):
    from typer.testing import CliRunner

    from rlbench.cli import app

    cell = _hand_cell(tmp_path)
    res = CliRunner().invoke(app, ["export", str(cell), "--out", str(tmp_path / "logs")], terminal_width=200)
    assert res.exit_code == 0, res.output
    assert f"exported: {tmp_path / 'logs' / cell.name}.eval" in res.output and "inspect view --log-dir" in res.output
    assert read_eval_log(str(tmp_path / "logs" / f"{cell.name}.eval")).samples[0].id == cell.name
    res = CliRunner().invoke(app, ["export", str(cell), "--format", "atif"], terminal_width=200)
    assert res.exit_code == 2 and "Python >= 3.12" in res.output
    res = CliRunner().invoke(app, ["export", str(tmp_path / "nowhere")], terminal_width=200)
    assert res.exit_code == 2 and "no result.json" in res.output
    (cell / "result.json").write_text('{"cell": "x", "status": "exploded"')
    res = CliRunner().invoke(app, ["export", str(cell)], terminal_width=200)
    assert res.exit_code == 2 and "not a readable cell result" in res.output


def test_a_cell_that_crashed_before_its_agent_ran_exports_as_an_error_with_no_scores(tmp_path):
    from rlbench.reports.export import export_cell

    cell = tmp_path / "crashed-cell"
    cell.mkdir()
    (cell / "result.json").write_text(json.dumps({
        "cell": "crashed-cell", "agent": "react", "task": "arith-tiny", "seed": 1, "status": "crashed",
        "crash_by": "harness", "reason": "the sandbox would not start", "started": "2026-12-06T10:00:00Z",
        "budget": ["not", "a", "budget"], "llm_usage": {"m": "not usage"}, "cell_seconds": float("nan")}))
    log = read_eval_log(str(export_cell(cell, "inspect", tmp_path / "c.eval")))
    (sample,) = log.samples
    assert log.status == "error" and "the sandbox would not start" in log.error.message
    assert sample.error.message == log.error.message and sample.scores is None and log.results.scores == []
    assert _roles(sample) == ["user"] and "arith-tiny" in sample.messages[0].text
    assert sample.metadata["rlbench_export"]["description"] == "task name"
    assert sample.model_usage == {} and sample.working_time is None and sample.total_time is None
