"""`ray job submit` for real: a Ray head and a worker node started with `ray start` on this
machine (loopback only, token authentication as Ray 2.60 enables it on a local cluster), and a
suite submitted the way ray_configs/README.md shows. The head has no CPUs for cells, so the cell
runs on the worker, from the working directory Ray uploaded: its agent's command imports
rlbench.sdk inside the sandbox and submits."""

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


def _ray_pids(temp_dir: Path) -> list[int]:
    """Every process of this test's cluster: those whose command line names its temp folder."""
    out = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                if str(temp_dir) in Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace"):
                    out.append(int(pid))
            except OSError:
                continue
    return out


@pytest.fixture
def cluster(tmp_path):
    """A head (no CPUs for cells, the dashboard and job API on loopback) and one worker (2 CPUs),
    stopped by process id at the end: `ray stop` would stop every Ray on the machine."""
    temp = Path(tempfile.mkdtemp(prefix="rlray-", dir="/tmp"))  # short: Ray's socket paths must fit 107 bytes
    gcs, dash = _free_port(), _free_port()
    env = {**os.environ, "PATH": f"{BIN}:{os.environ['PATH']}", "RAY_AUTH_MODE": "token",
           "RAY_AUTH_TOKEN": secrets.token_hex(32), "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    env.pop("PYTHONPATH", None)  # the job's code comes from its uploaded working directory
    start = [str(BIN / "ray"), "start", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    try:
        subprocess.run(start + ["--head", f"--port={gcs}", "--num-cpus=0", "--include-dashboard=true",
                                "--dashboard-host=127.0.0.1", f"--dashboard-port={dash}", f"--temp-dir={temp}"],
                       env=env, check=True, capture_output=True, timeout=180)
        subprocess.run(start + [f"--address=127.0.0.1:{gcs}", "--num-cpus=2"], env=env, check=True,
                       capture_output=True, timeout=180)
        yield env, f"http://127.0.0.1:{dash}"
    finally:
        for pid in _ray_pids(temp):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        shutil.rmtree(temp, ignore_errors=True)


def test_a_suite_submitted_as_a_ray_job_runs_on_the_worker_and_its_agent_imports_rlbench(cluster, tmp_path):
    env, address = cluster
    results = tmp_path / "results"
    results.mkdir()
    os.chmod(results, 0o777)
    runtime_env = {"excludes": [".venv", "runs", "results", ".git", "__pycache__"],
                   "env_vars": {"RLBENCH_RESULTS": str(results), "RLBENCH_HOME": str(tmp_path / "home"),
                                "RLBENCH_SPLIT_SEED": "public"}}
    command = "python -c 'from rlbench import sdk; print(sdk.submit(str(sdk.model_path())))'"
    submit = [str(BIN / "ray"), "job", "submit", "--address", address, "--working-dir", str(REPO),
              "--runtime-env-json", json.dumps(runtime_env), "--",
              "python", "-m", "rlbench.cli", "run", "agent=command", "task=arith-grpo", "suite=job", "budget_s=60",
              "cell_cpus=2", f"agent_options.command={command}"]
    for _ in range(60):  # the head's job agent comes up a few seconds after `ray start` returns
        job = subprocess.run(submit, env=env, capture_output=True, text=True, timeout=900)
        if "No available agent to submit job" not in job.stderr + job.stdout:
            break
        time.sleep(2)
    assert job.returncode == 0, job.stdout[-3000:] + job.stderr[-3000:]
    result = json.loads(next((results / "suites" / "job" / "cells").glob("*/result.json")).read_text())
    assert result["status"] == "ok" and result["submissions"]["valid"] == 1, result["reason"]
    # the head offers no CPUs, so the cell's 2-CPU task can only have run on the worker node
    assert result["node"], result
