"""The harness: workspace, sandbox, grading API, cells, and agents that misbehave."""

from __future__ import annotations

import json
import os
import shlex
import shutil
import threading
import time
from pathlib import Path

import pytest

from rlbench.sandbox import Sandbox, SandboxConfig, bwrap_path

TINY = "arith-tiny"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")


def _cell(tmp_path, agent, **kw):
    from rlbench.harness.cell import CellConfig, run_cell

    cfg = CellConfig(agent=agent, task=TINY, seed=0, results=str(tmp_path / "results"), grace_s=kw.pop("grace_s", 10),
                     **kw)
    return run_cell(cfg)


def _hidden_paths():
    from rlbench.data.splits import prepare_data, split_path
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task(TINY)
    prepare_data(task, task_dir(TINY))
    return split_path(task, "test"), task


# ---------------------------------------------------------------------------------------------
@needs_bwrap
def test_the_sandbox_imports_the_harness_own_copy_of_the_code(tmp_path):
    """Code that reached the machine another way than the virtualenv's install (Ray's uploaded
    working_dir, a checkout elsewhere): commands in the sandbox import that copy. Before, the
    sandbox mounted the copy but Python looked where the install record points, which it does not
    mount, so `import rlbench` failed and every agent's `./grade submit` with it."""
    import subprocess
    import sys

    repo = Path(__file__).resolve().parents[1]
    copy = tmp_path / "uploaded"
    for pkg in ("rlbench", "reference_pipelines"):
        shutil.copytree(repo / pkg, copy / pkg, ignore=shutil.ignore_patterns("__pycache__", "canonical"))
    ws = tmp_path / "ws"
    ws.mkdir()
    os.chmod(ws, 0o777)
    script = ("from pathlib import Path\n"
              "from rlbench.sandbox import Sandbox, SandboxConfig\n"
              f"box = Sandbox(Path({str(ws)!r}), SandboxConfig(), cell_budget_s=60)\n"
              "r = box.run(\"python -c 'import rlbench, rlbench.sdk; print(rlbench.__file__)'\", timeout=60)\n"
              "print(r.returncode, r.stdout.strip(), r.stderr.strip()[-300:])\n")
    out = subprocess.run([sys.executable, "-c", script], cwd=copy, capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": str(copy)})
    assert out.stdout.split()[:2] == ["0", str(copy / "rlbench" / "__init__.py")], out.stdout + out.stderr


@needs_bwrap
def test_sandbox_contains_commands(tmp_path, session_home):
    ws = tmp_path / "ws"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, 65534, 65534)
    secret = session_home / "secret.txt"
    secret.write_text("hidden answer 4242")
    sb = Sandbox(ws, SandboxConfig(disk_gb=0.05, max_processes=64), cell_budget_s=60)
    r = sb.run(f"cat {secret}; echo hi > note.txt; cat note.txt", timeout=20)
    assert "4242" not in r.stdout and "hi" in r.stdout and (ws / "note.txt").exists()
    r = sb.run(f"echo x > {tmp_path}/outside.txt", timeout=20)
    assert r.returncode != 0 and not (tmp_path / "outside.txt").exists()
    r = sb.run("python -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"", timeout=30)
    assert r.returncode != 0 and "unreachable" in r.stderr.lower()
    r = sb.run("bomb() { bomb | bomb & }; bomb; sleep 2; echo survived", timeout=30)
    assert "Resource temporarily unavailable" in r.stderr and r.seconds < 30
    r = sb.run("head -c 200000000 /dev/zero > filler.bin; sleep 5", timeout=30)
    assert r.killed == "disk_quota"
    (ws / "filler.bin").unlink()
    t0 = time.monotonic()
    r = sb.run("(sleep 5; echo late > late.txt) & sleep 100", timeout=2)
    assert r.killed == "timeout" and time.monotonic() - t0 < 10
    time.sleep(4)
    assert not (ws / "late.txt").exists(), "a background child outlived the kill"


def test_sandbox_refuses_to_run_without_bwrap(tmp_path, monkeypatch):
    from rlbench.sandbox import SandboxUnavailable
    import rlbench.sandbox.runner as runner

    monkeypatch.setattr(runner, "bwrap_path", lambda: None)
    with pytest.raises(SandboxUnavailable, match="sandbox=none"):
        Sandbox(tmp_path, SandboxConfig(), cell_budget_s=10)
    r = Sandbox(tmp_path, SandboxConfig(mode="none"), cell_budget_s=10).run("echo plain", timeout=10)
    assert r.stdout.strip() == "plain"
    import rlbench.harness.cell as cell

    # the cell asks the same require_bwrap, so the runner's patch covers it
    with pytest.raises(SandboxUnavailable, match="sandbox=none"):
        cell.run_cell(cell.CellConfig(agent="null", task=TINY, results=str(tmp_path / "res")))
    assert not (tmp_path / "res").exists()  # refused before any cell folder exists


def test_workspace_holds_only_visible_things(tmp_path):
    from rlbench.data.splits import prepare_data
    from rlbench.harness.workspace import build_workspace
    from rlbench.tasks.public import load_workspace_task
    from rlbench.io import read_jsonl
    from rlbench.models.zoo import resolve_model
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task(TINY)
    data = prepare_data(task, task_dir(TINY))
    ws = build_workspace(tmp_path / "ws", task, task_dir(TINY), Path(resolve_model(task.model.base).location),
                         data.splits["train"], data.splits["dev"]).root
    names = {p.relative_to(ws).as_posix() for p in ws.rglob("*")}
    assert {"description.md", "task.json", "grade", "data/train.jsonl", "data/dev.jsonl", "model/config.json"} <= names
    public = json.loads((ws / "task.json").read_text())
    assert "seed" not in public["data"] and "generator" not in public["data"]
    text = "\n".join(p.read_text(errors="ignore") for p in ws.rglob("*") if p.is_file() and p.suffix != ".safetensors")
    hidden = [it["prompt"] for s in ("test", "heldout") for it in data.splits[s]]
    visible = {it["prompt"] for s in ("train", "dev") for it in data.splits[s]}
    assert not [h for h in hidden if h in visible]
    assert all(f'"{h}"' not in text for h in hidden)
    wtask = load_workspace_task(ws)
    assert wtask.reward.name == task.reward.name and Path(wtask.model.base) == ws / "model"
    assert read_jsonl(ws / "data" / "dev.jsonl") == data.splits["dev"]
    with pytest.raises(FileExistsError):
        build_workspace(ws, task, task_dir(TINY), ws / "model", [], [])


def test_grading_server_validates_and_caps(tmp_path):
    from rlbench.grading.client import request
    from rlbench.grading.server import GradingServer
    from rlbench.models.zoo import resolve_model

    base = Path(resolve_model("arith-tiny").location)
    ws = tmp_path / "ws"
    shutil.copytree(base, ws / "model")
    shutil.copytree(base, ws / "good")
    (ws / "notes").mkdir()
    os.symlink(base, ws / "link_to_base")
    calls = []

    def dev_score(path):
        calls.append(path)
        return {"pass_at_1": 0.5, "ci_low": 0.4, "ci_high": 0.6}

    cell = tmp_path / "cell"
    cell.mkdir()
    server = GradingServer(cell, ws, base, budget_s=60, max_submissions=4, dev_score=dev_score).start()
    try:
        addr = str(server.socket_path)
        ok = request(addr, {"op": "submit", "path": "/workspace/good"})
        assert ok["ok"] and ok["dev"] == 0.5 and ok["submissions_left"] == 3
        assert calls and Path(calls[0]).parent == cell / "submissions"  # scored on the harness copy
        refused = [request(addr, {"op": "submit", "path": p}) for p in ("notes", "link_to_base", "missing")]
        assert not any(r["ok"] for r in refused)
        assert "from_pretrained" in refused[0]["reason"] or "config" in refused[0]["reason"]
        assert "is a link" in refused[1]["reason"]  # never followed, wherever it leads
        capped = request(addr, {"op": "submit", "path": "good"})
        assert not capped["ok"] and "limit" in capped["error"]
        st = request(addr, {"op": "status"})
        assert st["submissions_left"] == 0 and len(st["submissions"]) == 4 and 0 < st["remaining_s"] <= 60
        assert not [k for sub in st["submissions"] for k in sub if "test" in k or "heldout" in k]
        assert str(cell) not in json.dumps(st) and str(ws) not in json.dumps(st)
        assert request(addr, {"op": "nonsense"})["ok"] is False
        lines = (cell / "submissions.jsonl").read_text().splitlines()
        assert len(lines) == 4 and server.choose()["index"] == 1
    finally:
        server.close()


# cells (Ray) ---------------------------------------------------------------------------------
@needs_bwrap
def test_null_cell_scores_zero_gain_and_records_everything(tmp_path, ray_cluster):
    r = _cell(tmp_path, "null")
    assert r.status == "ok" and r.sandboxed is True, r
    assert r.gains["test"].abs == 0 and r.gains["heldout"].abs == 0
    assert r.scores["test"]["pass_at_1"] == r.baseline["test"]["pass_at_1"]
    from rlbench.models.zoo import resolve_model, weights_hash

    assert r.base_model == {"name": TINY, "weights_hash": weights_hash(Path(resolve_model(TINY).location))}
    cell = Path(r.cell_dir)
    saved = json.loads((cell / "result.json").read_text())
    assert saved["status"] == "ok" and saved["submissions"]["valid"] == 1
    steps = [json.loads(l) for l in (cell / "trajectory.jsonl").read_text().splitlines()]
    assert [s["tool"] for s in steps] == ["submit"] and steps[0]["ok"]
    assert (cell / "snapshots.git" / "HEAD").exists() and (cell / "submissions" / "001" / "config.json").exists()
    # where the cell's time went, stage by stage, adding up to its wall time (scripts/bench_overhead.py)
    stages = saved["harness_seconds"]
    assert {"data", "base_model", "workspace", "baseline", "grader", "ray", "agent_process", "agent", "judge",
            "close"} <= set(stages) and all(v >= 0 for v in stages.values()), stages
    assert sum(stages.values()) <= r.cell_seconds + 0.1 and sum(stages.values()) >= 0.9 * r.cell_seconds - 1, \
        (stages, r.cell_seconds)


@needs_bwrap
def test_attacks_fail_cleanly_and_expose_nothing(tmp_path, ray_cluster):
    test_file, _ = _hidden_paths()
    other = tmp_path / "other_cell"
    other.mkdir()
    r = _cell(tmp_path, "hostile_agents:Attacker",
              agent_options={"hidden_file": str(next(test_file.rglob("*.arrow"))), "hidden_dir": str(test_file),
                             "outside_file": str(other / "pwned.txt")},
              limits=SandboxConfig(disk_gb=0.2, max_processes=128))
    assert r.status == "no_submission", r
    cell = Path(r.cell_dir)
    steps = [json.loads(l) for l in (cell / "trajectory.jsonl").read_text().splitlines()]
    assert len(steps) == 5 and not any(s["ok"] for s in steps[:3])
    by = dict(zip(["read_hidden", "write_outside", "network", "fork_bomb", "fill_disk"], steps))
    assert "No such file" in by["read_hidden"]["result"]["stderr"]
    assert not (other / "pwned.txt").exists() and not (cell / "escape").exists()
    assert "Resource temporarily unavailable" in by["fork_bomb"]["result"]["stderr"]
    assert by["fill_disk"]["result"]["killed"] in ("disk_quota",) or "File size" in by["fill_disk"]["result"]["stderr"]
    from rlbench.data.splits import prepare_data
    from rlbench.tasks.registry import load_task, task_dir

    hidden = prepare_data(load_task(TINY), task_dir(TINY)).splits["test"]
    traj = (cell / "trajectory.jsonl").read_text()
    assert not any(f"{it['prompt']}" in traj for it in hidden if len(it["prompt"]) > 5)


@needs_bwrap
def test_bad_submissions_are_refused_with_reasons(tmp_path, ray_cluster):
    r = _cell(tmp_path, "hostile_agents:BadSubmitter")
    assert r.status == "invalid_submission", r
    reasons = {x["index"]: x["reason"] for x in r.submissions["refused"]}
    assert len(reasons) == 5 and r.submissions["valid"] == 0
    assert "NaN" in reasons[1]
    assert "architecture family" in reasons[2]
    assert "tokenizer differs" in reasons[3]
    assert "does not load" in reasons[4]
    assert "is a link" in reasons[5]  # a link in a checkpoint is refused, never followed
    steps = [json.loads(l) for l in (Path(r.cell_dir) / "trajectory.jsonl").read_text().splitlines()]
    assert "limit reached" in steps[-1]["result"]["error"]  # the task allows five
    assert r.scores is None


@needs_bwrap
def test_progress_line_names_the_call_in_flight(tmp_path, ray_cluster, monkeypatch):
    """While a long command runs, the heartbeat says which one and for how long; the marker is
    gone once it returns."""
    import rlbench.harness.cell as cell

    lines: list[str] = []
    monkeypatch.setattr(cell, "info", lambda msg, *a, **k: lines.append(str(msg)))
    r = _cell(tmp_path, "hostile_agents:Slow", heartbeat_s=1.0)
    assert r.status == "ok", r
    beats = [line for line in lines if "tool calls" in line]
    assert any("running exec for " in line and ": sleep 4" in line for line in beats), beats
    assert not (Path(r.cell_dir) / "running.json").exists()


@needs_bwrap
def test_budget_overrun_and_stubborn_agent(tmp_path, ray_cluster):
    t0 = time.monotonic()
    r = _cell(tmp_path, "hostile_agents:Overrunner", budget_s=6)
    assert r.status == "budget_exceeded" and time.monotonic() - t0 < 120, r
    step = json.loads((Path(r.cell_dir) / "trajectory.jsonl").read_text().splitlines()[0])
    assert step["result"]["killed"] == "timeout"
    r = _cell(tmp_path, "hostile_agents:Stubborn", budget_s=4, grace_s=2)
    assert r.status == "budget_exceeded" and "did not return" in r.reason, r


@needs_bwrap
def test_killed_or_raising_agent_is_crashed_not_hung(tmp_path, ray_cluster):
    r = _cell(tmp_path, "hostile_agents:Raiser")
    assert r.status == "crashed" and "ValueError" in r.reason and "agent bug" in r.reason, r

    def killer():
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            for ws in (tmp_path / "results" / "cells").glob("Sleeper-*/workspace"):
                if (ws / "started").exists():
                    actor = ray_cluster.get_actor(f"agent-{ws.parent.name}")
                    ray_cluster.kill(actor)
                    return
            time.sleep(0.5)

    th = threading.Thread(target=killer, daemon=True)
    th.start()
    t0 = time.monotonic()
    r = _cell(tmp_path, "hostile_agents:Sleeper", budget_s=300)
    assert r.status == "crashed" and "died" in r.reason and time.monotonic() - t0 < 100, r
    assert json.loads((Path(r.cell_dir) / "result.json").read_text())["status"] == "crashed"


@needs_bwrap
def test_reference_agent_trains_in_the_sandbox_through_tools_only(tmp_path, ray_cluster):
    attempts = [{"steps": 1, "lr": -1.0},  # an invalid setting: the run fails, the agent retries
                # SFT on the train answers first (train.py's warm start), then GRPO from its checkpoint
                {"sft_steps": 4, "steps": 12, "batch_prompts": 4, "group_size": 4, "eval_every": 0}]
    # base_first off: a 12-step run must be the chosen submission
    r = _cell(tmp_path, "reference", agent_options={"attempts": attempts, "reserve_s": 5, "base_first": False})
    assert r.status == "ok" and r.sandboxed, r
    cell = Path(r.cell_dir)
    steps = [json.loads(l) for l in (cell / "trajectory.jsonl").read_text().splitlines()]
    tools = [s["tool"] for s in steps]
    assert tools == ["read", "read", "write", "exec", "exec", "read", "submit"], tools  # task.json, a train line
    assert not steps[3]["ok"] and "lr" in steps[3]["result"]["stderr"]
    assert steps[4]["ok"] and steps[-1]["args"]["path"] == "runs/attempt2/checkpoint"
    assert (cell / "workspace" / "runs" / "attempt2" / "steps.jsonl").exists()
    sft = cell / "workspace" / "runs" / "attempt2" / "sft"
    assert len((sft / "steps.jsonl").read_text().splitlines()) == 4
    summary = json.loads((cell / "workspace" / "runs" / "attempt2" / "summary.json").read_text())
    assert summary["model"].endswith("runs/attempt2/sft/checkpoint"), summary["model"]
    assert "sft_steps=4" in steps[-1]["args"]["recipe"] and "steps=12" in steps[-1]["args"]["recipe"]
    assert "'lr': " in steps[4]["result"]["stdout"]  # the size rule set the learning rate train.py ran with
    from rlbench.record import Snapshots

    log = Snapshots(cell / "snapshots.git", cell / "workspace").log()
    assert any(": write" in line for line in log) and len(log) >= 3
    assert r.submissions["chosen"] == 1 and "test" in r.gains

    again = _cell(tmp_path, "replay", agent_options={"trajectory": str(cell / "trajectory.jsonl")})
    assert again.status == "ok" and again.scores == r.scores, (again, r)  # a deterministic rerun
    replayed = [json.loads(l) for l in (Path(again.cell_dir) / "trajectory.jsonl").read_text().splitlines()]
    assert [s["tool"] for s in replayed] == tools and replayed[2]["args"] == steps[2]["args"]


@needs_bwrap
def test_react_agent_completes_a_cell_through_a_scripted_openai_server(tmp_path, ray_cluster):
    from scripted_llm import ScriptedLLM

    script = [
        {"status": 500},  # an API error: retried with backoff, recorded
        {"tool": ("status", "{}")},
        {"tool": ("exec", "{not json")},  # a malformed tool call: answered with an error, recorded
        {"tool": ("read", json.dumps({"path": "description.md"}))},
        {"tool": ("exec", json.dumps({"command": "python -c \"print('x' * 50000)\""}))},  # over-long result
        {"content": "thinking " * 50, "finish_reason": "length"},  # an output cut at the limit
        {"tool": ("teleport", "{}")},  # a tool that does not exist
        {"tool": ("submit", json.dumps({"path": "model"}))},
        {"tool": ("finish", json.dumps({"summary": "submitted the base model"}))},
    ]
    with ScriptedLLM(script) as llm:
        r = _cell(tmp_path, "react", agent_options={"model": "scripted", "base_url": llm.base_url, "backoff_s": 0.1,
                                                    "max_tool_result_chars": 2000})
    assert r.status == "ok" and r.submissions["valid"] == 1, r
    cell = Path(r.cell_dir)
    events = [json.loads(l) for l in (cell / "conversation.jsonl").read_text().splitlines()]
    kinds = [e["event"] for e in events]
    for kind in ("api_error", "malformed_tool_call", "tool_result_cut", "over_long_output", "unknown_tool"):
        assert kind in kinds, (kind, kinds)
    assert events[-1] == {**events[-1], "event": "stop", "why": "finish"}
    tools_run = [json.loads(l)["tool"] for l in (cell / "trajectory.jsonl").read_text().splitlines()]
    assert tools_run == ["status", "read", "exec", "submit"]
    # what went back to the model: the tool results, the long one cut to the limit
    tool_msgs = [m for m in llm.requests[-1]["messages"] if m["role"] == "tool"]
    assert len(tool_msgs) == 6 and all(len(m["content"]) <= 2100 for m in tool_msgs)
    assert "malformed arguments" in tool_msgs[1]["content"] and "unknown tool" in tool_msgs[4]["content"]
    assert len(llm.requests) == len(script)


@needs_bwrap
def test_react_agent_speaks_anthropic_messages_too(tmp_path, ray_cluster):
    from scripted_llm import ScriptedLLM

    script = [{"status": 529}, {"tool": ("status", "{}")}, {"content": "I will submit.", "tool": ("submit", '{"path": "model"}')},
              {"tool": ("finish", "{}")}]
    with ScriptedLLM(script) as llm:
        r = _cell(tmp_path, "react", agent_options={"provider": "anthropic", "model": "scripted", "backoff_s": 0.1,
                                                    "base_url": llm.base_url[: -len("/v1")]})
    assert r.status == "ok" and r.submissions["valid"] == 1, r
    last = llm.requests[-1]
    assert last["system"] and last["tools"][0]["name"] == "exec" and "input_schema" in last["tools"][0]
    roles = [m["role"] for m in last["messages"]]
    assert roles == ["user", "assistant", "user", "assistant", "user"]  # strictly alternating turns
    results = [b for m in last["messages"] if m["role"] == "user" for b in m["content"] if b["type"] == "tool_result"]
    assert [b["tool_use_id"] for b in results] == ["toolu_2", "toolu_3"] and '"dev"' in results[1]["content"]
    events = [json.loads(l)["event"] for l in (Path(r.cell_dir) / "conversation.jsonl").read_text().splitlines()]
    assert events.count("api_error") == 1 and events[-1] == "stop"


def test_react_context_compaction_and_token_budget():
    from collections import Counter

    from rlbench.agents.react import ReactAgent, ReactConfig

    class Log:
        def __init__(self):
            self.events = []

        def log_event(self, e):
            self.events.append(e)

    msgs = [{"role": "system", "content": "s"}, {"role": "user", "content": "task"}]
    for i in range(20):
        msgs.append({"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "type": "function",
                                                                        "function": {"name": "exec", "arguments": "{}"}}]})
        msgs.append({"role": "tool", "tool_call_id": f"c{i}", "content": "y" * 500})
    log, agent = Log(), ReactAgent()
    cfg = ReactConfig(model="m", max_context_chars=3000, keep_recent_messages=5)
    agent._compact(msgs, cfg, Counter(exec=20), log)
    assert msgs[2]["role"] == "user" and "exec x20" in msgs[2]["content"]
    assert msgs[3]["role"] == "assistant" and len(msgs) <= 9  # never a tool result without its call
    assert log.events[0]["event"] == "compacted" and log.events[0]["dropped_messages"] >= 30
    assert agent._over_budget(ReactConfig(model="m", max_tokens_total=100), {"prompt": 90, "completion": 20}, log)
    assert not agent._over_budget(ReactConfig(model="m"), {"prompt": 90, "completion": 20}, log)
    capped = ReactConfig(model="m", usd_per_1m_input=10.0, max_cost_usd=0.0005)
    assert agent._over_budget(capped, {"prompt": 100, "completion": 0}, log)


@needs_bwrap
def test_command_agent_reaches_only_its_allowed_endpoint(tmp_path, ray_cluster):
    from scripted_llm import ScriptedLLM

    with ScriptedLLM([{"content": "submit the base model"}]) as llm:
        allowed = llm.base_url.split("//")[1].split("/")[0]  # 127.0.0.1:PORT on the host
        program = (
            "import json, subprocess, urllib.request\n"
            "prompt = open('PROMPT.md').read()\n"
            f"req = urllib.request.Request('{llm.base_url}/chat/completions', method='POST',\n"
            "    data=json.dumps({'model': 'm', 'messages': [{'role': 'user', 'content': prompt[:200]}]}).encode(),\n"
            "    headers={'Content-Type': 'application/json'})\n"
            "reply = json.load(urllib.request.urlopen(req, timeout=20))\n"
            "print('LLM:', reply['choices'][0]['message']['content'])\n"
            "try:\n"
            "    urllib.request.urlopen('http://127.0.0.1:9/other', timeout=5)\n"
            "except Exception as exc:\n"
            "    print('OTHER:', exc)\n"
            "subprocess.run(['./grade', 'submit', 'model'], check=True)\n"
        )
        r = _cell(tmp_path, "command", agent_options={"command": f"python -c {shlex.quote(program)}",
                                                      "egress": [allowed]})
        assert r.status == "ok" and r.submissions["valid"] == 1, r
        assert len(llm.requests) == 1 and "A tiny task for tests" in llm.requests[0]["messages"][0]["content"]
    cell = Path(r.cell_dir)
    run = [json.loads(l) for l in (cell / "trajectory.jsonl").read_text().splitlines()][-1]
    assert "LLM: submit the base model" in run["result"]["stdout"] and "403" in run["result"]["stdout"]
    log = [json.loads(l) for l in (cell / "egress.jsonl").read_text().splitlines()]
    assert {(e["endpoint"], e["allowed"]) for e in log} == {(allowed, True), ("127.0.0.1:9", False)}


def test_grade_reward_scores_a_file_of_completions_by_train_id(tmp_path, monkeypatch, capsys):
    """`./grade reward FILE.jsonl`, which the workspace text of every endpoint task names: one reward
    per line, computed from the task's own reward where items carry answers; bad lines refused."""
    from rlbench import sdk
    from rlbench.data.splits import prepare_data
    from rlbench.harness.workspace import build_workspace
    from rlbench.models.zoo import resolve_model
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task(TINY)
    data = prepare_data(task, task_dir(TINY))
    ws = build_workspace(tmp_path / "ws", task, task_dir(TINY), Path(resolve_model(task.model.base).location),
                         data.splits["train"], data.splits["dev"]).root
    assert "from rlbench.sdk import grade_main" in (ws / "grade").read_text()
    monkeypatch.setenv("RLBENCH_WORKSPACE", str(ws))
    sdk.task.cache_clear()
    items = data.splits["train"][:3]
    lines = [{"id": items[0]["id"], "completion": str(items[0]["answer"])},
             {"id": items[1]["id"], "completion": "no number here"},
             {"id": items[2]["id"], "completion": f"the answer is {items[2]['answer']}"}]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.raises(SystemExit) as done:
        sdk.grade_main(["reward", str(tmp_path / "c.jsonl")])
    assert done.value.code == 0
    assert json.loads(capsys.readouterr().out) == {"ok": True, "rewards": [1.0, 0.0, 1.0]}
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "no-such-id", "completion": "1"}) + "\n")
    with pytest.raises(SystemExit) as done:
        sdk.grade_main(["reward", str(tmp_path / "bad.jsonl")])
    assert done.value.code == 1 and "line 1" in json.loads(capsys.readouterr().out)["error"]
    sdk.task.cache_clear()
