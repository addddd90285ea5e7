"""One tool registry (issue 23): every list of agent tools (the ToolBox, the react agent's function
list and dispatch check, the replay agent's replayable set, the workspace description) comes from
rlbench/harness/tool_registry.py, so they can no longer drift apart; replay repeats `claim` calls;
a ToolBox call is recorded as before."""

from __future__ import annotations

import inspect
import json
from pathlib import Path
from typing import Any

import pytest

from rlbench.harness.tool_registry import names, parse_docstring, tool
from rlbench.harness.tools import TOOL_SPECS

RECORD_KEYS = {"step", "tool", "args", "result", "seconds", "cpu_s", "snapshot", "ok", "time"}
CLAIM_ARGS = {"index": 2, "test_gain": 0.1, "ci": [0.07, 0.13]}
# ToolBox methods an agent's Python code may call that are not tools for its model
HARNESS_METHODS = {"log_event", "open_egress", "remaining", "relative", "record_usage", "run_program"}


class Recorder:
    """A stand-in ToolBox: every tool call is kept, with its keyword arguments."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, dict[str, Any]]] = []

    def __getattr__(self, name: str):
        def call(**kwargs: Any) -> dict[str, Any]:
            self.calls.append((name, kwargs))
            return {"ok": True}

        return call


def _write_trajectory(path: Path, steps: list[tuple[str, dict[str, Any]]]) -> None:
    path.write_text("".join(json.dumps({"step": i + 1, "tool": t, "args": a, "result": {"ok": True}, "ok": True}) + "\n"
                            for i, (t, a) in enumerate(steps)))


def test_replay_repeats_claims_with_their_recorded_arguments(tmp_path):
    from rlbench.agents.replay import ReplayAgent

    steps = [("exec", {"command": "python train.py", "timeout": None}), ("submit", {"path": "out/ckpt", "recipe": ""}),
             ("claim", CLAIM_ARGS), ("teleport", {"to": "the test split"}), ("status", {})]
    _write_trajectory(tmp_path / "trajectory.jsonl", steps)
    fake = Recorder()
    ReplayAgent(trajectory=str(tmp_path / "trajectory.jsonl")).run("", fake)
    assert fake.calls == [s for s in steps if s[0] != "teleport"]  # claim replayed; an unknown tool is not


def _toolbox(tmp_path: Path, name: str, monkeypatch, remaining_s: float = 100.0):
    """A real ToolBox (no sandbox) whose grading server is a function: what it was sent is kept."""
    from rlbench.harness import tools as tools_module
    from rlbench.sandbox import SandboxConfig

    sent: list[dict[str, Any]] = []

    def grader(address: str, payload: dict[str, Any], timeout: float = 3600.0) -> dict[str, Any]:
        sent.append(payload)
        if payload["op"] == "status":
            return {"ok": True, "remaining_s": remaining_s}
        return {"ok": True, "index": 1, "dev": 0.5} if payload["op"] == "submit" else {"ok": True}

    monkeypatch.setattr(tools_module, "request", grader)
    ws, cell = tmp_path / name / "ws", tmp_path / name / "cell"
    ws.mkdir(parents=True)
    cell.mkdir()
    return tools_module.ToolBox(cell, ws, "grader.sock", SandboxConfig(mode="none"), budget_s=60), sent


def _steps(box) -> list[dict[str, Any]]:
    return [json.loads(line) for line in box.trajectory.path.read_text().splitlines()]


def test_a_toolbox_trajectory_replays_call_for_call_claim_included(tmp_path, monkeypatch):
    from rlbench.agents.replay import ReplayAgent

    box, _ = _toolbox(tmp_path, "first", monkeypatch)
    box.write("notes.txt", "hello")
    assert box.exec("cat notes.txt | tee copy.txt", timeout=30)["stdout"] == "hello"
    assert box.read("notes.txt", max_bytes=3)["content"] == "hel"
    box.submit("model")
    assert box.claim(1, 0.1, (0.07, 0.13))["ok"]
    box.status()
    first = _steps(box)
    assert [s["tool"] for s in first] == ["write", "exec", "read", "submit", "claim", "status"]
    assert all(set(s) == RECORD_KEYS for s in first), first
    assert first[4]["args"] == {"index": 1, "test_gain": 0.1, "ci": [0.07, 0.13]}  # the interval as a list
    assert first[1]["args"] == {"command": "cat notes.txt | tee copy.txt", "timeout": 30}
    # a snapshot after the calls that may change files, none after the others
    assert [s["snapshot"] is not None for s in first] == [True, True, False, False, False, False]

    again, sent = _toolbox(tmp_path, "again", monkeypatch)
    ReplayAgent(trajectory=str(box.trajectory.path)).run("", again)
    replayed = _steps(again)
    assert [(s["tool"], s["args"]) for s in replayed] == [(s["tool"], s["args"]) for s in first]
    assert {"op": "claim", "index": 1, "test_gain": 0.1, "ci": [0.07, 0.13]} in sent
    assert replayed[1]["result"]["stdout"] == "hello" and again.calls == len(first)


def test_refused_calls_are_recorded_without_a_snapshot(tmp_path, monkeypatch):
    box, _ = _toolbox(tmp_path, "spent", monkeypatch, remaining_s=0.0)
    assert box.exec("true") == {"ok": False, "error": "the budget is spent"} and box.budget_hit
    (box.workspace / ".rlbench").mkdir()
    (box.workspace / ".rlbench" / "tool").write_text("a file where the scripts' folder goes")
    assert "cannot save the script" in box.python("print(1)")["error"]
    assert "outside the workspace" in box.read("../../etc/passwd")["error"]
    with pytest.raises(TypeError):
        box.exec(cmd="true")  # a wrong argument is refused before anything runs, and not recorded
    steps = _steps(box)
    assert [(s["tool"], s["ok"], s["snapshot"]) for s in steps] == [("exec", False, None), ("python", False, None),
                                                                    ("read", False, None)]
    assert steps[1]["args"] == {"code": "print(1)", "timeout": None} and box.calls == 3


def test_every_tool_list_is_the_registry():
    from rlbench.agents import react
    from rlbench.agents.replay import REPLAYABLE
    from rlbench.harness.tools import TOOLS, ToolBox

    every = list(names(TOOL_SPECS))
    assert every == ["exec", "python", "read", "write", "submit", "sweep", "claim", "status"]
    public = {n for n, v in vars(ToolBox).items() if callable(v) and not n.startswith("_")}
    assert public - HARNESS_METHODS == set(every)  # a ToolBox method is a tool, or a known harness helper
    assert list(TOOLS) == every
    assert [f["function"]["name"] for f in react.FUNCTIONS] == every + ["finish"]
    assert [t["name"] for t in react.ANTHROPIC_TOOLS] == every + ["finish"]
    assert react.TOOLS == set(every)
    assert REPLAYABLE == {s.name for s in TOOL_SPECS if s.replayable} == set(every)
    changing = {s.name for s in TOOL_SPECS if s.changes_files}
    assert changing == {"exec", "python", "write", "sweep"}
    assert {s.name: s.needs for s in TOOL_SPECS if s.needs} == {"sweep": "sweeps", "claim": "claims"}


def test_react_dispatches_claim_and_refuses_unknown_tools():
    from collections import Counter

    from rlbench.agents.react import Call, ReactAgent

    class Tools(Recorder):
        def log_event(self, event: dict[str, Any]) -> None:
            self.calls.append(("log_event", event))

    fake = Tools()
    result = ReactAgent()._dispatch(Call("c1", "claim", json.dumps(CLAIM_ARGS)), fake, Counter(), 1)
    assert result == {"ok": True} and fake.calls == [("claim", CLAIM_ARGS)]
    refused = ReactAgent()._dispatch(Call("c2", "open_egress", "{}"), fake, Counter(), 2)
    assert "unknown tool" in refused["error"] and "claim" in refused["error"]


def test_each_schema_is_the_methods_signature():
    for spec in TOOL_SPECS:
        params = list(inspect.signature(spec.func).parameters.values())[1:]
        schema = spec.parameters()
        assert list(schema["properties"]) == [p.name for p in params], spec.name
        assert schema["required"] == [p.name for p in params if p.default is p.empty], spec.name
        assert all(prop["type"] and prop["description"] for prop in schema["properties"].values()), spec.name
        assert spec.description and spec.anthropic()["input_schema"] == schema
    by_name = {s.name: s for s in TOOL_SPECS}
    assert by_name["exec"].required() == ["command"] and by_name["submit"].required() == ["path"]
    assert by_name["claim"].required() == ["index", "test_gain", "ci"]
    ci = by_name["claim"].parameters()["properties"]["ci"]
    assert (ci["type"], ci["items"], ci["minItems"], ci["maxItems"]) == ("array", {"type": "number"}, 2, 2)
    types = {n: p["type"] for n, p in by_name["read"].parameters()["properties"].items()}
    assert types == {"path": "string", "max_bytes": "integer"}
    assert by_name["exec"].parameters()["properties"]["timeout"]["type"] == "number"  # float | None
    assert "dev score" in by_name["submit"].description and "{seed}" in by_name["submit"].parameters()[
        "properties"]["recipe"]["description"]


def test_docstrings_become_descriptions_and_an_undocumented_parameter_is_an_error():
    class Host:
        @tool(changes_files=False)
        def good(self, path: str, limit: int = 3) -> dict[str, Any]:
            """First line
            goes on.

            Args:
                path: where it is,
                    continued here.
                limit: how many.

            Not part of the arguments.
            """
            return {"ok": True}

        @tool(changes_files=False)
        def bad(self, path: str, extra: list[str]) -> dict[str, Any]:
            """Something.

            Args:
                path: a path.
            """
            return {"ok": True}

    from rlbench.harness.tool_registry import specs_of

    good, bad = specs_of(Host)
    assert parse_docstring(good.func) == ("First line goes on.", {"path": "where it is, continued here.",
                                                                  "limit": "how many."})
    assert good.parameters()["required"] == ["path"]
    with pytest.raises(ValueError, match="extra"):
        bad.parameters()


def _task(claims: bool, sweeps: int):
    from rlbench.tasks.spec import TaskConfig

    task = TaskConfig(name="t", version="1", category="specialization", difficulty="easy", kind="implement")
    task.claims.required = claims
    task.budget.max_sweeps = sweeps
    return task


def _tools_rule(text: str) -> str:
    """The description's rule that names the tools, joined onto one line."""
    start = text.index("Work through your tools (")
    return " ".join(text[start:text.index(")", start) + 1].split())


@pytest.mark.parametrize("claims,sweeps", [(False, 0), (True, 0), (False, 2), (True, 1)])
def test_the_workspace_description_names_the_tools_the_task_offers(tmp_path, claims, sweeps):
    from rlbench.harness.workspace import _description

    (tmp_path / "description.md").write_text("# t\nA task.\n")
    task = _task(claims, sweeps)
    text = _description(task, tmp_path, {"train": 10, "dev": 5})
    rule = _tools_rule(text)
    listed = ["exec", "python", "read", "write", "submit"] + ["sweep"] * bool(sweeps) + ["claim"] * claims + ["status"]
    assert rule == f"Work through your tools ({', '.join(listed)})"
    assert ("claim" in rule) == claims == ("./grade claim INDEX" in text)
    assert ("sweep" in rule) == bool(sweeps) == ("./grade sweep design.yaml" in text)
    if not claims and not sweeps:  # the text a task with neither had before the registry
        assert "Work through your tools (exec, python, read, write,\n  submit, status)." in text
    assert "./grade submit PATH" in text and "sdk.claim(index, gain, (low, high))" in text  # unchanged lines
    assert max(len(line) for line in text.splitlines() if "Work through" in line) <= 100


def test_a_tool_needs_a_task_feature_by_its_name_and_the_feature_says_when_it_is_offered():
    from rlbench.features import FEATURES
    from rlbench.harness.tool_registry import task_features

    with pytest.raises(ValueError, match="no such task feature"):
        tool(changes_files=False, needs="sweep")  # the tool's name, not the feature's: refused at import
    names_ = {f.name for f in FEATURES}
    assert {s.needs for s in TOOL_SPECS if s.needs} <= names_
    # the cell's budget, not the task's, decides whether sweeps are offered
    task = _task(claims=False, sweeps=0)
    more = type(task.budget)(**{**vars(task.budget), "max_sweeps": 2})
    assert "sweeps" not in task_features(task) and "sweeps" in task_features(task, more)
    assert "claims" in task_features(_task(claims=True, sweeps=0)) and "claims" not in task_features(task)
