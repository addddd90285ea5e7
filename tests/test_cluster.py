"""`ray job submit` for real: a Ray head and a worker node started with `ray start` on this
machine (loopback only, token authentication as Ray 2.60 enables it on a local cluster), and a
suite submitted the way ray_configs/README.md shows, with its runtime env file. The head has no
CPUs for cells, so the cells run on the worker, from the working directory Ray uploaded: the
reference agent trains and gains, and a command agent's script imports rlbench.sdk inside the
sandbox and submits."""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from rlbench.sandbox import bwrap_path

REPO = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
pytestmark = [pytest.mark.slow, pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing")]


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _agent_ports() -> list[str]:
    """A node's agents on free ports: their defaults (52365, ...) may be taken by another Ray on
    this machine, and the job API then answers "No available agent" for good."""
    return [f"--dashboard-agent-listen-port={_free_port()}", f"--dashboard-agent-grpc-port={_free_port()}",
            f"--runtime-env-agent-port={_free_port()}", f"--metrics-export-port={_free_port()}"]


def _ray_pids(temp_dir: Path, environ: bool = False) -> list[int]:
    """This test's cluster's processes: those whose command line names its temp folder (with
    `environ`, also every process started under it, job drivers included: they inherit
    RLBENCH_TEST_CLUSTER)."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                mine = str(temp_dir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
                if not mine and environ:
                    mine = f"RLBENCH_TEST_CLUSTER={temp_dir}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
                if mine and int(pid) != os.getpid():
                    out.append(int(pid))
            except OSError:
                continue
    return out


class Cluster:
    def __init__(self, env: dict[str, str], address: str, gcs: str, temp: Path, start: list[str]):
        self.env, self.address, self.gcs, self.temp, self.start = env, address, gcs, temp, start

    def add_worker(self, cpus: int = 2) -> list[int]:
        """Start a worker node; the ids of the processes it added (its raylet among them). Its own
        temp folder (inside the test's), as a node of a real cluster has its own disk: a worker that
        shared the head's session folder unpacked the job's working directory into the very folder
        the job's driver was running from (a driver once failed to import a module there)."""
        before = set(_ray_pids(self.temp))
        self.workers = getattr(self, "workers", 0) + 1
        subprocess.run(self.start + [f"--address={self.gcs}", f"--num-cpus={cpus}", f"--temp-dir={self.temp}/w{self.workers}",
                                     *_agent_ports()], env=self.env, check=True, capture_output=True, timeout=180)
        return sorted(set(_ray_pids(self.temp)) - before)

    def submit(self, runtime_env: dict, *args: str) -> subprocess.Popen:
        """`ray job submit` as ray_configs/README.md shows, retried while the head's job agent starts."""
        cmd = [str(BIN / "ray"), "job", "submit", "--address", self.address, "--working-dir", str(REPO),
               "--runtime-env-json", json.dumps(runtime_env), "--", "python", "-m", "rlbench.cli", *args]
        for _ in range(60):
            job = subprocess.run(cmd, env=self.env, capture_output=True, text=True, timeout=900)
            if "No available agent to submit job" not in job.stderr + job.stdout:
                return job
            time.sleep(2)
        return job


@pytest.fixture
def cluster(tmp_path):
    """A head (no CPUs for cells, the dashboard and job API on loopback) and one worker (2 CPUs),
    stopped by process id at the end: `ray stop` would stop every Ray on the machine."""
    temp = Path(tempfile.mkdtemp(prefix="rlray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    gcs, dash = _free_port(), _free_port()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0",
           "RLBENCH_TEST_CLUSTER": str(temp), "RAY_TMPDIR": str(temp)}  # no address file left in /tmp/ray
    env.pop("RAY_ADDRESS", None)
    env.pop("PYTHONPATH", None)  # the job's code comes from its uploaded working directory
    env.pop("RLBENCH_QUIET", None)  # as a user's shell has it: the job's log shows the suite's progress
    start = [str(BIN / "ray"), "start", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    try:
        subprocess.run(start + ["--head", f"--port={gcs}", "--num-cpus=0", "--include-dashboard=true",
                                "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--temp-dir={temp}",
                                *_agent_ports()],
                       env=env, check=True, capture_output=True, timeout=180)
        yield Cluster(env, f"http://127.0.0.1:{dash}", f"127.0.0.1:{gcs}", temp, start)
    finally:
        for pid in _ray_pids(temp, environ=True):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


def _runtime_env(tmp_path: Path) -> dict:
    """ray_configs/job-runtime-env.yaml as the README says to use it, its shared paths pointed at
    this test's folders (one machine: every node sees them), on the public-seed splits."""
    import yaml

    env = yaml.safe_load((REPO / "ray_configs" / "job-runtime-env.yaml").read_text())
    results = tmp_path / "results"
    results.mkdir(exist_ok=True)
    os.chmod(results, 0o777)
    env["env_vars"].update(RLBENCH_RESULTS=str(results), RLBENCH_HOME=str(tmp_path / "home"),
                           RLBENCH_SPLIT_SEED="public")
    return env


SUBMIT = "python -c 'from rlbench import sdk; print(sdk.submit(str(sdk.model_path())))'"
REFERENCE_BUDGET_S = 240  # the reference agent's budget on arith-grpo: enough for a gain on 2 CPUs


def test_a_suite_submitted_as_a_ray_job_runs_on_the_worker_and_its_agent_imports_rlbench(cluster, tmp_path):
    """The reference agent trains on arith-grpo and gains; a command agent's script imports
    rlbench.sdk inside the sandbox and submits; both cells run on the worker (the head offers no
    CPUs), and the suite's progress is in the job's log while it runs, not only at its end."""
    cluster.add_worker()
    job = cluster.submit(_runtime_env(tmp_path), "run", "agents=[reference,command]", "task=arith-grpo", "suite=job",
                         f"budget_s={REFERENCE_BUDGET_S}", "cell_cpus=2", f"agent_options.command={SUBMIT}",
                         "reports=false")
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    log = job.stdout + job.stderr
    assert "running 2 cells" in log and "submission 1: valid" in log, log[-3000:]
    results = {r["agent"]: r for r in json.loads((tmp_path / "results" / "suites" / "job" / "results.json").read_text())}
    command, reference = results["command"], results["reference"]
    assert command["status"] == "ok" and command["submissions"]["valid"] == 1, command["reason"]
    assert reference["status"] == "ok", reference["reason"]
    assert reference["gains"]["test"]["abs"] > 0, reference["gains"]["test"]
    assert command["node"] and reference["node"], results


def test_a_node_lost_mid_cell_leaves_it_crashed_and_a_resume_finishes_it(cluster, tmp_path):
    """The worker's raylet is killed while its cell runs: the cell ends `crashed` by the harness
    with the reason, the job still finishes, and a resume on a new worker reruns that cell to ok."""
    import threading

    worker = cluster.add_worker()
    raylet = [pid for pid in worker if b"raylet/raylet" in Path(f"/proc/{pid}/cmdline").read_bytes()]
    assert len(raylet) == 1, worker
    env = _runtime_env(tmp_path)
    box: dict = {}
    runner = threading.Thread(target=lambda: box.update(job=cluster.submit(
        env, "run", "agent=command", "task=arith-grpo", "suite=lost", "budget_s=120", "cell_cpus=2",
        f"agent_options.command=sleep 25; {SUBMIT}")))
    runner.start()
    cells = tmp_path / "results" / "suites" / "lost" / "cells"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not any(cells.glob("*/trajectory.jsonl")):  # the agent is at work
        time.sleep(1)
    assert any(cells.glob("*/trajectory.jsonl")), "the cell never started"
    time.sleep(3)
    os.kill(raylet[0], signal.SIGKILL)
    runner.join(timeout=600)
    job = box["job"]  # `rlbench run` exits 1 when the harness crashed a cell: the job fails, its suite stands
    assert job.returncode != 0 and "exit code 1" in job.stdout + job.stderr, job.stdout[-3000:] + job.stderr[-3000:]
    suite = tmp_path / "results" / "suites" / "lost"
    lost = json.loads((suite / "results.json").read_text())[0]
    assert lost["status"] == "crashed" and lost["crash_by"] == "harness", lost
    cluster.add_worker()
    again = cluster.submit(env, "run", f"resume={suite}")
    assert again.returncode == 0, again.stdout[-3000:] + again.stderr[-3000:]
    resumed = json.loads((suite / "results.json").read_text())[0]
    assert resumed["status"] == "ok" and resumed["submissions"]["valid"] == 1, resumed
