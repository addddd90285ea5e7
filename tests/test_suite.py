"""Suites: the matrix on Ray, spread over nodes, and killed then resumed to the same table."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import TESTS, rlbench_cmd
from rlbench.sandbox import bwrap_path

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
CELLS = ["Slow-arith-tiny-s0", "Slow-arith-tiny-s1", "Slow-arith-tiny-s2"]


def _suite_args(results: Path, name: str) -> list[str]:
    # an agent that pauses before it submits: a cell is surely still running when the driver is killed
    return ["run", "agent=hostile_agents:Slow", "task=arith-tiny", "seeds=[0,1,2]", f"results={results}", f"suite={name}",
            "cell_cpus=1", "--quiet"]


def _table(suite_dir: Path) -> dict[str, tuple]:
    rows = json.loads((suite_dir / "results.json").read_text())
    return {r["cell"]: (r["status"], r["scores"]["test"]["pass_at_1"], r["scores"]["heldout"]["pass_at_1"])
            for r in rows}


def test_suite_killed_mid_run_resumes_to_the_same_table(tmp_path):
    env = {**os.environ, "RLBENCH_QUIET": "1",
           "PYTHONPATH": os.pathsep.join(p for p in (str(TESTS), os.environ.get("PYTHONPATH", "")) if p)}
    straight = subprocess.run(rlbench_cmd() + _suite_args(tmp_path, "straight"), capture_output=True, text=True,
                              env=env, timeout=900)
    assert straight.returncode == 0, straight.stdout[-2000:] + straight.stderr[-2000:]
    want = _table(tmp_path / "suites" / "straight")
    assert sorted(want) == CELLS and all(v[0] == "ok" for v in want.values())
    # cell_cpus=1: no more cells at once than the embedded Ray's CPUs, though each blocks on its agent
    spans = [(r["started"], r["finished"]) for r in json.loads((tmp_path / "suites" / "straight" / "results.json").read_text())]
    most = max(sum(1 for b in spans if b[0] <= a[0] < b[1]) for a in spans)
    assert most <= max(1, os.cpu_count() or 1), spans

    gate = tmp_path / "gate"  # the first cell pauses 4 s, the others 30 s: one is surely mid-run at the kill
    gate.mkdir()
    driver = subprocess.Popen(rlbench_cmd() + _suite_args(tmp_path, "killed"), stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, env={**env, "RLBENCH_TEST_SLOW_GATE": str(gate)},
                              start_new_session=True)
    cells = tmp_path / "suites" / "killed" / "cells"

    def statuses() -> dict[str, str]:
        out = {}
        for p in cells.glob("*/result.json"):
            try:
                out[p.parent.name] = json.loads(p.read_text()).get("status")
            except ValueError:  # being replaced right now
                out[p.parent.name] = "running"
        return out

    deadline = time.monotonic() + 600
    while time.monotonic() < deadline:  # kill once one cell has finished and another is running
        st = statuses()
        if "ok" in st.values() and "running" in st.values():
            break
        time.sleep(0.2)
    os.killpg(driver.pid, signal.SIGKILL)
    driver.wait()
    time.sleep(3)  # Ray kills the dead driver's tasks
    unfinished = sorted(k for k, v in statuses().items() if v == "running")
    assert unfinished and not (tmp_path / "suites" / "killed" / "results.json").exists(), statuses()
    resumed = subprocess.run(rlbench_cmd() + ["run", f"resume={tmp_path / 'suites' / 'killed'}", "--quiet"],
                             capture_output=True, text=True, env=env, timeout=900)
    assert resumed.returncode == 0, resumed.stdout[-2000:] + resumed.stderr[-2000:]
    assert _table(tmp_path / "suites" / "killed") == want
    for key in unfinished:  # set aside for the record, rerun from a fresh workspace
        assert (cells / f"{key}.attempt-1").is_dir() and (cells / key / "result.json").is_file(), key


def test_cells_spread_over_two_ray_nodes(tmp_path):
    import ray
    from ray.cluster_utils import Cluster

    from rlbench.orchestration.suite import load_run_spec, run_suite

    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 1})
    cluster.add_node(num_cpus=1)
    try:
        ray.init(address=cluster.address, log_to_driver=False)
        spec = load_run_spec(["agent=null", "task=arith-tiny", "seeds=[0,1]", f"results={tmp_path}", "suite=two",
                              "cell_cpus=1"])
        _, results = run_suite(spec)
        assert [r.status for r in results] == ["ok", "ok"]
        assert len({r.node for r in results}) == 2, [r.node for r in results]
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_ray_configs_cluster_job_and_suite_files_are_valid():
    import yaml
    from ray.autoscaler._private.util import prepare_config, validate_config
    from ray.runtime_env import RuntimeEnv

    from rlbench.orchestration.suite import expand, load_run_spec

    root = Path(__file__).resolve().parent.parent / "ray_configs"
    validate_config(prepare_config(yaml.safe_load((root / "cluster.yaml").read_text())))
    env = RuntimeEnv(**yaml.safe_load((root / "job-runtime-env.yaml").read_text()))
    assert ".venv" in env["excludes"] and "RLBENCH_RESULTS" in env["env_vars"]
    spec = load_run_spec(["seeds=[0]"], str(root / "suite-arith.yaml"))
    assert [(c.agent, c.task, c.seed) for c in expand(spec)] == [
        ("null", "arith-grpo", 0), ("null", "hpo-grpo", 0), ("reference", "arith-grpo", 0), ("reference", "hpo-grpo", 0)]
    assert spec.robustness.seeds == 3 and spec.robustness.agents == ["reference"]


def test_suite_of_all_tasks_lists_every_task_folder_that_runs_on_its_device(monkeypatch):
    """`tasks: [all]` is the CPU suite on cpu and every task, the real tier's too, on cuda."""
    from rlbench.orchestration.suite import expand, load_run_spec
    from rlbench.tasks.registry import list_tasks

    repo = Path(__file__).resolve().parent.parent
    monkeypatch.setenv("RLBENCH_TASKS", str(repo / "tasks"))
    every = [t.name for t in list_tasks()]
    cpu = [t.name for t in list_tasks("cpu")]
    assert {"arith-grpo", "debug-grpo", "format-if", "pref-ppo"} <= set(cpu) and "gsm8k-grpo" not in cpu
    assert set(every) - set(cpu) == {"gsm8k-grpo", "code-grpo", "ifeval-grpo"}
    spec = load_run_spec(["seeds=[0]"], str(repo / "ray_configs" / "suite-all.yaml"))
    assert [(c.agent, c.task) for c in expand(spec)] == [(a, t) for a in ("null", "reference") for t in cpu]
    gpu = load_run_spec(["seeds=[0]", "device=cuda", "cell_gpus=1"], str(repo / "ray_configs" / "suite-all.yaml"))
    assert [(c.agent, c.task) for c in expand(gpu)] == [(a, t) for a in ("null", "reference") for t in every]


@pytest.mark.slow
def test_a_suite_refuses_cells_on_another_base(tmp_path, monkeypatch):
    """Issue 22: a gain on other bytes of the base is a gain on another task. The suite records
    its bases by hash, refuses to resume on others, and leaves a cell whose base differs out of
    its scores (kept in results.json, marked), ending in an error."""
    from rlbench.models.zoo import pins
    from rlbench.orchestration import suite as suite_mod
    from rlbench.orchestration.suite import MixedBases, load_run_spec, run_suite

    args = ["agent=null", "task=arith-tiny", "seeds=[0]", f"results={tmp_path}", "cell_cpus=1", "reports=false"]
    suite_dir, results = run_suite(load_run_spec(args + ["suite=one"]))
    assert results[0].status == "ok"
    bases = json.loads((suite_dir / "suite.json").read_text())["bases"]
    assert bases == {"arith-tiny": pins()["arith-tiny"].weights_hash} == {"arith-tiny": results[0].base_model["weights_hash"]}

    monkeypatch.setattr(suite_mod, "suite_bases", lambda cells: {"arith-tiny": "0" * 16})
    with pytest.raises(MixedBases, match="the suite ran on other base models"):
        run_suite(load_run_spec([f"resume={suite_dir}"]))
    with pytest.raises(MixedBases, match="1 cell"):
        run_suite(load_run_spec(args + ["suite=two"]))
    two = tmp_path / "suites" / "two"
    row = json.loads((two / "results.json").read_text())[0]
    assert "0000000000000000" in row["refused_by_suite"] and row["status"] == "ok"
    assert json.loads((two / "scores.json").read_text())["cells"] == []


def test_cells_go_where_their_custom_resources_are_and_a_node_with_other_hidden_splits_refuses_them(
        tmp_path, monkeypatch):
    """Two worker nodes on secret splits: `good` shares the driver's RLBENCH_HOME, `stray` has one of
    its own (a node the shared folder never reached). A cell reserving `good` runs there and is
    ok; a cell reserving `stray` is refused there with the reason, never scored on other test items."""
    import ray
    from ray.cluster_utils import Cluster

    from rlbench.orchestration.suite import load_run_spec, run_suite

    monkeypatch.setenv("RLBENCH_SPLIT_SEED", "secret")
    home = os.environ["RLBENCH_HOME"]
    if ray.is_initialized():
        ray.shutdown()
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 0})
    try:
        good = cluster.add_node(num_cpus=1, resources={"good": 1})
        monkeypatch.setenv("RLBENCH_HOME", str(tmp_path / "stray-home"))  # the raylet and its workers inherit it
        cluster.add_node(num_cpus=1, resources={"stray": 1})
        monkeypatch.setenv("RLBENCH_HOME", home)
        ray.init(address=cluster.address, log_to_driver=False)
        args = ["agent=null", "task=arith-tiny", f"results={tmp_path}", "reports=false", "cell_cpus=1"]
        _, (ok,) = run_suite(load_run_spec(args + ["suite=good", "cell_resources={good: 1}"]))
        assert ok.status == "ok" and ok.node == good.node_id, (ok.status, ok.reason, ok.node)
        assert ok.splits["seed_source"] == "secret"
        _, (refused,) = run_suite(load_run_spec(args + ["suite=stray", "cell_resources={stray: 1}"]))
        assert refused.status == "crashed" and refused.crash_by == "harness", refused
        assert "other hidden splits than the suite's driver" in refused.reason, refused.reason
        assert "no split secret at" in refused.reason and "stray-home" in refused.reason, refused.reason
        assert not list((tmp_path / "stray-home").rglob("splits.secret"))  # the node made no secret of its own
        with pytest.raises(Exception, match="no node of the cluster can hold a cell"):
            run_suite(load_run_spec(args + ["suite=nowhere", "cell_resources={tpu: 1}"]))
    finally:
        ray.shutdown()
        cluster.shutdown()


def test_a_failed_cell_task_gives_its_own_error_whole_not_rays_wrapper_cut_short(tmp_path):
    from rlbench.orchestration.suite import REASON_CHARS, _task_failure

    class Wrapper(Exception):  # as ray.exceptions.RayTaskError holds the task's own error
        def __init__(self, cause: BaseException):
            super().__init__("ray.exceptions.RayTaskError(...)\nTraceback ...\n" + "x" * 3000)
            self.cause = cause

    message = "node lost while the cell ran: " + "the whole story [red]with markup-like text[/] " * 20
    reason = _task_failure(Wrapper(ConnectionError(message)), tmp_path, "null-arith-tiny-s0")
    assert reason.startswith("cell task failed: ConnectionError: node lost") and message.strip() in reason
    assert "RayTaskError" not in reason and len(message) > 500
    saved = (tmp_path / "errors" / "null-arith-tiny-s0.txt").read_text()
    assert "RayTaskError" in saved and "x" * 3000 in saved and str(tmp_path / "errors") in reason
    long = _task_failure(ValueError("y" * 10_000), tmp_path, "k")
    assert "y" * (REASON_CHARS - len("ValueError: ")) + " ..." in long and "y" * 2001 not in long
