"""Issue 21, holes 5 and 10: the grading server under a connection flood from the sandbox, agent
crashes that a suite must not rerun, and an orphan Ray that must not stop `rlbench run`."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest

from conftest import TESTS
from hostile_agents import FLOOD_SCRIPT
from rlbench.sandbox import bwrap_path

TINY = "arith-tiny"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")


def _server(tmp_path: Path, **kw):
    from rlbench.grading.server import GradingServer

    (tmp_path / "cell").mkdir()
    (tmp_path / "ws").mkdir()
    return GradingServer(tmp_path / "cell", tmp_path / "ws", tmp_path / "ws", budget_s=600, max_submissions=1,
                         dev_score=lambda p: {"pass_at_1": 0.0, "ci_low": 0.0, "ci_high": 0.0}, **kw)


def _flood(address: str, n: int, hold_s: float, cwd: Path) -> subprocess.Popen:
    """Another process (not the server's: it counts as the sandbox) holding n idle connections."""
    code = f"N, HOLD = {n}, {hold_s}\n" + FLOOD_SCRIPT
    return subprocess.Popen([sys.executable, "-c", code], cwd=cwd, env={**os.environ, "RLBENCH_GRADER": address},
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def _wait_for(path: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while not path.exists():
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


def test_grading_server_caps_and_times_out_idle_connections(tmp_path):
    """300 idle connections from another process: the server keeps at most its cap open (no
    thread or descriptor per connection beyond it), refuses the rest at once, closes the idle
    ones after its read timeout, answers the harness throughout, and the sandbox once it is over."""
    from rlbench.grading.client import request
    from rlbench.sandbox.listener import MAX_CONNECTIONS

    server = _server(tmp_path).start()
    server.gate.read_timeout_s = 1.0
    threads_before = threading.active_count()
    try:
        addr = str(server.socket_path)
        flood = _flood(addr, 300, 3.0, tmp_path)
        _wait_for(tmp_path / "flood_holding", 60)
        assert threading.active_count() <= threads_before + MAX_CONNECTIONS + 2
        assert request(addr, {"op": "status"}, timeout=10)["ok"]  # this process is the harness: its own pool
        out, err = flood.communicate(timeout=60)
        counts = json.loads(out.strip().splitlines()[-1])
        assert counts["opened"] == 300 and counts["closed_by_server"] == 300, (counts, err[-2000:])
        assert counts["refused"] == 300 - MAX_CONNECTIONS, counts
        seen = server.connections()
        assert seen["refused_connections"] == 300 - MAX_CONNECTIONS and seen["timed_out_connections"] == MAX_CONNECTIONS
        assert seen["peak_connections"]["sandbox"] == MAX_CONNECTIONS, seen
        # the sandbox is served again once the flood is gone
        again = subprocess.run([sys.executable, "-c", "import json; from rlbench.grading.client import request; "
                                f"print(json.dumps(request({addr!r}, {{'op': 'status'}}, timeout=10)))"],
                               capture_output=True, text=True, timeout=60)
        assert json.loads(again.stdout)["ok"], again.stderr[-2000:]
        assert server.alive()
    finally:
        server.close()


def test_grading_server_outlives_running_out_of_descriptors(tmp_path):
    """With the cell process out of descriptors, accept() fails with EMFILE: the loop pauses
    instead of dying or spinning, and serves the next connection once descriptors are back."""
    from rlbench.grading.client import request

    server = _server(tmp_path).start()
    server.gate.read_timeout_s = 30.0  # the held connections stay while descriptors are short
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    flood = subprocess.Popen([sys.executable, "-c", "N, HOLD = 40, 4.0\n" + FLOOD_SCRIPT], cwd=tmp_path,
                             env={**os.environ, "RLBENCH_GRADER": str(server.socket_path)}, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        resource.setrlimit(resource.RLIMIT_NOFILE, (len(os.listdir("/proc/self/fd")) + 4, hard))
        try:
            _wait_for(tmp_path / "flood_holding", 60)
            time.sleep(0.5)
            assert server.connections()["accept_errors"] > 0 and server.alive()
        finally:
            resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
        flood.communicate(timeout=60)
        assert request(str(server.socket_path), {"op": "status"}, timeout=10)["ok"] and server.alive()
    finally:
        flood.kill()
        server.close()


def test_integrity_verdict_counts_a_grader_flood():
    from rlbench.integrity.verdict import FLOOD, integrity_section, with_broken_harness

    quiet = {"refused_connections": 0, "timed_out_connections": 0, "accept_errors": 0}
    assert integrity_section([], [], [], [], quiet)["verdict"] == "clean"
    few = integrity_section([], [], [], [], {**quiet, "timed_out_connections": 2})
    assert few["verdict"] == "suspicious" and few["events"][0]["event"] == "grader_flooded"
    flood = integrity_section([], [], [], [], {**quiet, "refused_connections": FLOOD})
    assert flood["verdict"] == "violated" and "flooded the grading server" in flood["reasons"][0]
    broken = with_broken_harness(few, "the grading server stopped while the agent ran")
    assert broken["verdict"] == "violated" and broken["events"][0]["event"] == "harness_broken"


# cells (Ray) ---------------------------------------------------------------------------------
def _cell(tmp_path, agent, **kw):
    from rlbench.harness.cell import CellConfig, run_cell

    return run_cell(CellConfig(agent=agent, task=TINY, seed=0, results=str(tmp_path / "results"), grace_s=10, **kw))


def _steps(result) -> list[dict]:
    return [json.loads(l) for l in (Path(result.cell_dir) / "trajectory.jsonl").read_text().splitlines()]


@needs_bwrap
@pytest.mark.slow
def test_grader_flood_from_the_sandbox_leaves_the_cell_ok_and_flagged(tmp_path, ray_cluster):
    """3000 idle connections from inside the sandbox, held while the agent submits: the grader
    keeps at most its cap open and closes the rest, the submission goes through, the cell ends ok
    (not crashed: no free retry), `./grade status` works after, and the verdict says violated."""
    from rlbench.sandbox.listener import MAX_CONNECTIONS

    t0 = time.monotonic()
    r = _cell(tmp_path, "hostile_agents:GraderFlooder", agent_options={"connections": 3000, "hold_s": 8})
    assert r.status == "ok" and r.submissions["valid"] == 1, r
    steps = _steps(r)
    tools = [s["tool"] for s in steps if s["tool"] != "read"]
    assert tools == ["submit", "python", "exec"], tools  # the submission was answered while the flood held on
    counts = json.loads(next(s for s in steps if s["tool"] == "python")["result"]["stdout"].strip().splitlines()[-1])
    assert counts["opened"] == 3000 and counts["closed_by_server"] == 3000, counts
    assert counts["nofile"] == 4096  # the sandbox's descriptor ceiling (SandboxConfig.max_open_files)
    g = r.grader
    assert g["refused_connections"] + g["timed_out_connections"] == 3000, g
    assert g["refused_connections"] >= 1000 and g["peak_connections"]["sandbox"] <= MAX_CONNECTIONS, g
    status = steps[-1]["result"]
    assert status["ok"] and json.loads(status["stdout"])["submissions_left"] >= 0, status
    assert r.integrity["verdict"] == "violated", r.integrity
    assert any(e["event"] == "grader_flooded" for e in r.integrity["events"])
    assert time.monotonic() - t0 < 120


@needs_bwrap
def test_agent_caused_harness_failure_is_harness_broken_not_crashed(tmp_path, ray_cluster, monkeypatch):
    """The harness running out of descriptors after the agent (what the agent holds costs the
    harness) gives `harness_broken`, crash_by agent, a violated verdict: final, never retried."""
    import errno

    import rlbench.evaluation.gain as gain

    def out_of_descriptors(*args, **kwargs):
        raise OSError(errno.EMFILE, "Too many open files")

    monkeypatch.setattr(gain, "score_against_base", out_of_descriptors)
    r = _cell(tmp_path, "null")
    assert r.status == "harness_broken" and r.crash_by == "agent", r
    assert "file descriptors" in r.reason and not r.reason.startswith("harness:")
    assert r.integrity["verdict"] == "violated" and r.integrity["events"][0]["event"] == "harness_broken"
    assert json.loads((Path(r.cell_dir) / "result.json").read_text())["status"] == "harness_broken"


@needs_bwrap
@pytest.mark.slow
def test_resume_reruns_harness_crashes_but_not_agent_crashes(tmp_path, ray_cluster):
    """An agent that raises crashes its cell by its own doing: a resumed suite keeps that result
    (a rerun would be a free retry), reruns a cell the harness crashed, and keeps harness_broken."""
    from rlbench.orchestration.suite import load_run_spec, run_suite

    spec = load_run_spec(["agent=hostile_agents:Raiser", f"task={TINY}", "seeds=[0,1,2]", f"results={tmp_path}",
                          "suite=crashes", "cell_cpus=1", "reports=false"])
    suite_dir, first = run_suite(spec)
    assert [(r.status, r.crash_by) for r in first] == [("crashed", "agent")] * 3, first
    cells = suite_dir / "cells"

    def rewrite(key: str, **changes) -> None:  # as the harness would have left it
        path = cells / key / "result.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), **changes}))

    rewrite("Raiser-arith-tiny-s1", reason="harness: RuntimeError: the node was lost", crash_by="harness")
    rewrite("Raiser-arith-tiny-s2", status="harness_broken", crash_by="agent",
            reason="the agent broke the harness: the grading server stopped while the agent ran")
    _, again = run_suite(load_run_spec([f"resume={suite_dir}"]))
    assert not (cells / "Raiser-arith-tiny-s0.attempt-1").exists() and again[0] == first[0]
    assert (cells / "Raiser-arith-tiny-s1.attempt-1").is_dir()  # the harness's crash: rerun from a fresh workspace
    assert again[1].status == "crashed" and again[1].crash_by == "agent"
    assert not (cells / "Raiser-arith-tiny-s2.attempt-1").exists() and again[2].status == "harness_broken"


# an orphan Ray (hole 10a) ----------------------------------------------------------------------
@pytest.mark.slow
def test_a_new_run_starts_its_own_ray_beside_an_orphan_cluster():
    """A `ray start --head` left from an earlier run is found through RAY_TMPDIR/ray/ray_current_cluster;
    ensure_ray must start a fresh embedded cluster, not join it (joining refuses num_cpus). The
    orphan lives under a private RAY_TMPDIR (no one else's run sees it) and is stopped by its
    process group, never by `ray stop` (that would stop every Ray on the machine)."""
    import signal

    tmp = tempfile.mkdtemp(prefix="rt")  # short: Ray's unix socket paths must fit in 107 bytes
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=tmp, PYTHONPATH=os.pathsep.join(p for p in (str(TESTS.parent), env.get("PYTHONPATH", "")) if p))
    ray_cli = str(Path(sys.executable).parent / "ray")
    orphan = subprocess.Popen([ray_cli, "start", "--head", "--num-cpus=1", "--port=0", "--block", "--disable-usage-stats",
                               "--include-dashboard=false"], env=env, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    child = None
    try:
        address_file = Path(tmp) / "ray" / "ray_current_cluster"
        _wait_for(address_file, 120)
        orphan_address = address_file.read_text().strip()
        code = ("import json, ray\nfrom rlbench.ray_session import ensure_ray\n"
                "ensure_ray(min_cpus=1)\n"
                "print(json.dumps({'gcs': ray.get_runtime_context().gcs_address, 'cpus': ray.cluster_resources()['CPU'],"
                " 'task': ray.get(ray.remote(lambda: 7).remote())}))\nray.shutdown()\n")
        child = subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 text=True, start_new_session=True)
        out, err = child.communicate(timeout=240)
        assert child.returncode == 0, err[-3000:]
        got = json.loads(out.strip().splitlines()[-1])
        assert got["task"] == 7 and got["gcs"] != orphan_address and got["cpus"] >= 1, (got, orphan_address)
    finally:
        for proc in (child, orphan):
            if proc is None:
                continue
            try:
                os.killpg(proc.pid, signal.SIGTERM)  # the group it leads: the orphan's gcs, raylet and workers
            except ProcessLookupError:
                pass
        orphan.wait(timeout=60)
        time.sleep(1)
        for proc in (child, orphan):
            if proc is not None:
                try:
                    os.killpg(proc.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        shutil.rmtree(tmp, ignore_errors=True)


def test_egress_proxy_caps_and_times_out_idle_connections(tmp_path):
    """The egress proxy is the other socket the sandbox reaches: the same gate bounds it."""
    import socket

    from rlbench.sandbox.egress import MAX_TUNNELS, EgressProxy

    proxy = EgressProxy(tmp_path / "egress.sock", ["example.invalid:443"], tmp_path / "egress.jsonl").start()
    proxy.gate.read_timeout_s = 1.0
    flood = _flood(str(proxy.socket_path), 300, 3.0, tmp_path)
    try:
        time.sleep(1.5)
        assert proxy.gate.peak["sandbox"] <= MAX_TUNNELS and proxy.gate.refused > 0
        time.sleep(2.5)
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:  # still serving, and still refusing
            s.settimeout(10)
            s.connect(str(proxy.socket_path))
            s.sendall(b"CONNECT evil.example:443 HTTP/1.1\r\nHost: evil.example\r\n\r\n")
            assert s.recv(100).startswith(b"HTTP/1.1 403")
        assert proxy.gate.timed_out > 0
    finally:
        flood.kill()
        flood.wait()
        proxy.close()
