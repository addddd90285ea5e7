"""Compute metered where it is spent: each sandboxed command's CPU seconds (a cgroup per command,
or the poller where none is writable), the cell's compute.cpu_s built from them, CPU budgets that
stop an agent, and the choice of the cell's own GPUs."""

from __future__ import annotations

import json
import os
import re
import time
import uuid
from pathlib import Path

import psutil
import pytest

from hostile_agents import BURN_SCRIPT
from rlbench.sandbox.compute import over_limit, select_devices, visible_device_ids
from rlbench.sandbox import Sandbox, SandboxConfig, bwrap_path
from rlbench.sandbox import accounting
from rlbench.sandbox.accounting import GROUP_DIR, find_hierarchies, meter_method, usable_hierarchy

TINY = "arith-tiny"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
CGROUPS = [m for m in ("cgroup-v2", "cgroup-v1") if usable_hierarchy(int(m[-1])) is not None]
TOLERANCE = 0.10  # metered within 10% of what the busy loops measured themselves


def _workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "burn.py").write_text(BURN_SCRIPT)
    if os.geteuid() == 0:  # the sandbox runs as uid 65534 under root
        os.chown(ws, 65534, 65534)
        os.chown(ws / "burn.py", 65534, 65534)
    return ws


def _left_cgroups() -> list[str]:
    """Our cgroups still on disk, in every hierarchy we can write: this process's, and any whose
    owner is gone (an agent or Tune worker that did not clean up)."""
    left = []
    for version in (1, 2):
        h = usable_hierarchy(version)
        parent = h.own / GROUP_DIR if h is not None else None
        if parent is None or not parent.is_dir():
            continue
        for p in parent.iterdir():
            m = re.match(r"(\d+)-(\d+)-\d+$", p.name)
            if p.is_dir() and m and (int(m.group(1)) == os.getpid()
                                     or accounting._start_ticks(int(m.group(1))) != int(m.group(2))):
                left.append(str(p))
    return left


def _running(token: str) -> list[int]:
    """Processes whose command line holds `token` (the test's own background children)."""
    found = []
    for p in psutil.process_iter(["cmdline"]):
        if any(token in part for part in (p.info["cmdline"] or [])):
            found.append(p.pid)
    return found


def _check(metered: float, expected: float) -> None:
    assert abs(metered - expected) <= TOLERANCE * expected, f"metered {metered:.3f} s, expected {expected:.3f} s"


@needs_bwrap
@pytest.mark.parametrize("mode,method", [*[("bwrap", m) for m in CGROUPS], ("bwrap", "poll"), ("none", "auto"),
                                         ("none", "poll")])
def test_sandboxed_cpu_is_metered_within_ten_percent(tmp_path, mode, method):
    """A 3 s busy loop; then two 1.5 s loops, one of them a background child that sleeps after
    its loop and is killed at the end of the call."""
    ws = _workspace(tmp_path)
    sb = Sandbox(ws, SandboxConfig(mode=mode, cpu_meter=method), cell_budget_s=120, scratch=tmp_path / "scratch")
    expect_method = meter_method(method)
    before = sb.cpu_used_s

    one = sb.run("python burn.py 3", timeout=120)
    assert one.ok and one.cpu_meter == expect_method, one
    _check(one.cpu_s, float(one.stdout.split()[-1]))

    token = f"bg-{uuid.uuid4().hex[:12]}.txt"
    two = sb.run(f"python burn.py 1.5 {token} & python burn.py 1.5; "
                 f"while [ ! -e {token} ]; do sleep 0.05; done; sleep 0.6", timeout=120)
    assert two.ok and two.cpu_meter == expect_method, two
    background = float((ws / token).read_text().split()[0])
    _check(two.cpu_s, float(two.stdout.split()[-1]) + background)

    assert sb.cpu_used_s == pytest.approx(before + one.cpu_s + two.cpu_s, abs=0.01)
    time.sleep(0.3)
    assert not _running(token), "the background child outlived the call"
    assert not _left_cgroups(), "a command's cgroup was left behind"


def test_a_cgroup_the_child_cannot_join_falls_back_to_polling(tmp_path, monkeypatch):
    if not CGROUPS:
        pytest.skip("no writable cgroup hierarchy here")

    def refuse(self):
        raise PermissionError("cgroup.procs: refused")

    monkeypatch.setattr(accounting.CgroupMeter, "join", refuse)
    sb = Sandbox(tmp_path, SandboxConfig(mode="none", cpu_meter=CGROUPS[0]), cell_budget_s=60, scratch=tmp_path / "scratch")
    r = sb.run("echo once >> runs.txt; echo ran", timeout=30)
    assert r.ok and r.stdout.strip() == "ran" and r.cpu_meter == "poll" and sb.cpu_meter == "poll"
    assert (tmp_path / "runs.txt").read_text() == "once\n"  # the refused start ran nothing
    assert not _left_cgroups()


def test_a_cgroup_method_that_is_missing_is_refused_by_name(monkeypatch):
    monkeypatch.setattr(accounting, "usable_hierarchy", lambda version: None)
    assert meter_method("auto") == "poll"
    with pytest.raises(ValueError, match="not available.*available: poll"):
        meter_method("cgroup-v2")
    with pytest.raises(ValueError, match="unknown CPU meter"):
        meter_method("rusage")


def test_cgroup_hierarchies_are_found_from_mountinfo():
    hybrid = ("30 25 0:26 / /sys/fs/cgroup/cpu,cpuacct rw,relatime shared:10 - cgroup cgroup rw,cpu,cpuacct\n"
              "31 25 0:27 / /sys/fs/cgroup/unified rw,relatime shared:11 - cgroup2 cgroup2 rw\n"
              "32 25 0:28 / /sys/fs/cgroup/memory rw,relatime shared:12 - cgroup cgroup rw,memory\n"
              "33 25 0:29 / /proc rw - proc proc rw\n")
    own = "4:memory:/m\n2:cpu,cpuacct:/jobs/7\n0::/user.slice/unit\n"
    v2, v1 = find_hierarchies(hybrid, own)
    assert (v2.version, v2.own) == (2, Path("/sys/fs/cgroup/unified/user.slice/unit"))
    assert (v1.version, v1.own, v1.method) == (1, Path("/sys/fs/cgroup/cpu,cpuacct/jobs/7"), "cgroup-v1")
    # a container sees only its subtree: the mount's root is its own cgroup
    container = "40 30 0:30 /docker/abc /sys/fs/cgroup rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n"
    assert find_hierarchies(container, "0::/docker/abc/inner\n")[0].own == Path("/sys/fs/cgroup/inner")
    assert find_hierarchies(container, "0::/elsewhere\n")[0].own == Path("/sys/fs/cgroup")
    assert find_hierarchies(r"41 30 0:31 / /mnt/cg\040v2 rw - cgroup2 none rw", "0::/\n")[0].own == Path("/mnt/cg v2")
    assert find_hierarchies("", own) == [] and find_hierarchies(hybrid, "") == []


def test_stale_cgroups_of_dead_owners_are_pruned():
    if not CGROUPS:
        pytest.skip("no writable cgroup hierarchy here")
    h = usable_hierarchy(int(CGROUPS[0][-1]))
    parent = h.own / GROUP_DIR
    parent.mkdir(exist_ok=True)
    dead = parent / "999999999-1-1"  # no process has that pid
    mine = accounting.CgroupMeter(h)  # live owner: kept
    dead.mkdir()
    try:
        accounting.prune_stale(parent)
        assert not dead.exists() and mine.path.is_dir()
    finally:
        mine.discard()
        if dead.exists():
            dead.rmdir()
    assert not _left_cgroups()


# the cell's own GPUs --------------------------------------------------------------------------
def test_gpu_seconds_count_only_the_cells_devices():
    devices = [(0, "GPU-aaaa-1111", "h0"), (1, "GPU-bbbb-2222", "h1"), (2, "GPU-cccc-3333", "h2")]
    assert select_devices(devices, None) == ["h0", "h1", "h2"]  # nothing says: every device
    assert select_devices(devices, []) == []  # given none: none
    assert select_devices(devices, ["2", "0"]) == ["h2", "h0"]
    assert select_devices(devices, ["GPU-bbbb"]) == ["h1"]  # a unique UUID prefix, as CUDA takes it
    assert select_devices(devices, ["GPU-", "7", "1", "1"]) == ["h1"]  # ambiguous or unknown ids select nothing
    assert visible_device_ids({}) is None
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": ""}) == []
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "1, GPU-cccc,-1,0"}) == ["1", "GPU-cccc"]  # CUDA stops at -1
    assert visible_device_ids({"CUDA_VISIBLE_DEVICES": "0,1"}, ray_ids=[2]) == ["2"]  # Ray's assignment first


def test_limits_name_what_passed():
    assert over_limit({"cpu_s": 9.0, "gpu_s": None}, 10, 0) == ""
    assert "CPU limit of 10 s" in over_limit({"cpu_s": 10.5, "gpu_s": None}, 10, 0)
    assert over_limit({"cpu_s": 10.5, "gpu_s": None}, 0, 5) == ""  # no CPU limit; GPU not metered
    assert "GPU limit of 5 s" in over_limit({"cpu_s": 1.0, "gpu_s": 6.0}, 0, 5)


def test_negative_compute_budgets_are_refused_before_anything_runs(tmp_path):
    from rlbench.config.core import ConfigError
    from rlbench.harness.cell import CellConfig, run_cell
    from rlbench.tasks.registry import load_task

    for key in ("budget_cpu_s", "budget_gpu_s"):
        with pytest.raises(ConfigError, match=key):
            run_cell(CellConfig(agent="null", task=TINY, results=str(tmp_path / "res"), sandbox="none", **{key: -1}))
    assert not (tmp_path / "res").exists()
    for key in ("cpu_seconds", "gpu_seconds"):
        with pytest.raises(ConfigError, match=f"budget.{key}"):
            load_task(TINY, [f"budget.{key}=-5"])
    with pytest.raises(ConfigError, match="sandbox.cpu_meter"):
        SandboxConfig(cpu_meter="rusage").validate()


# cells ------------------------------------------------------------------------------------------
def _cell(tmp_path, **kw):
    from rlbench.harness.cell import CellConfig, run_cell

    return run_cell(CellConfig(agent="hostile_agents:CpuBurner", task=TINY, seed=0, results=str(tmp_path / "results"),
                               grace_s=kw.pop("grace_s", 10), **kw))


@needs_bwrap
def test_a_cells_compute_counts_its_sandboxed_commands(tmp_path, ray_cluster):
    r = _cell(tmp_path, agent_options={"seconds": 3})
    assert r.status == "ok", r
    cell = Path(r.cell_dir)
    step = next(json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()
                if json.loads(line)["tool"] == "exec")
    burned = float(step["result"]["stdout"].split()[-1])
    _check(step["cpu_s"], burned)
    assert step["result"]["cpu_s"] == pytest.approx(step["cpu_s"], abs=0.01)
    compute = r.compute
    assert compute["cpu_meter"] == meter_method("auto")
    assert compute["sandbox_cpu_s"] >= step["cpu_s"] - 0.01 and compute["sandbox_cpu_s"] < burned * (1 + TOLERANCE) + 0.5
    assert compute["cpu_s"] == pytest.approx(compute["agent_cpu_s"] + compute["sandbox_cpu_s"] + compute["sweep_cpu_s"],
                                             abs=0.02)
    # the submission came after the burn: its compute stamp, read while the agent ran, holds it
    sub = json.loads((cell / "submissions.jsonl").read_text().splitlines()[0])
    assert sub["compute"]["sandbox_cpu_s"] >= 0.9 * burned
    assert r.capabilities["execution_cpu_seconds"] == pytest.approx(step["cpu_s"], abs=0.1)
    assert not _left_cgroups()


@needs_bwrap
def test_a_cpu_budget_stops_an_agent_that_burns_past_it(tmp_path, ray_cluster):
    t0 = time.monotonic()
    r = _cell(tmp_path, budget_cpu_s=6, agent_options={"seconds": 300, "timeout": 400})
    assert r.status == "budget_exceeded" and "CPU limit of 6 s" in r.reason, r
    assert time.monotonic() - t0 < 150
    cell = Path(r.cell_dir)
    steps = [json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()]
    burn = next(s for s in steps if s["tool"] == "exec")
    assert burn["result"]["killed"] == "budget" and "CPU limit" in burn["result"]["stderr"]
    assert burn["cpu_s"] < 20  # killed within a few seconds of the limit, not after 300
    submit = next(s for s in steps if s["tool"] == "submit")
    assert not submit["ok"] and "budget is spent" in submit["result"]["error"]
    assert r.budget["cpu_seconds"] == 6 and r.compute["cpu_s"] >= 6
    assert "6 CPU seconds" in (cell / "workspace" / "description.md").read_text()
    assert not _left_cgroups()


@needs_bwrap
@pytest.mark.slow
def test_a_cpu_budget_stops_a_sweep_midway(tmp_path, ray_cluster):
    """The trials' CPU counts while they run (their workers write it each second), so the limit
    kills a burning trial within seconds, and a trial that would start after it never runs."""
    from rlbench.harness.cell import CellConfig, run_cell

    t0 = time.monotonic()
    r = run_cell(CellConfig(agent="sweep_agents:SweepBurner", task=TINY, seed=0, results=str(tmp_path / "results"),
                            grace_s=10, budget_cpu_s=10, agent_options={"burn": 200}))
    assert r.status == "budget_exceeded" and "CPU limit of 10 s" in r.reason, r
    assert time.monotonic() - t0 < 150  # not the 400 s two trials of 200 s would take
    cell = Path(r.cell_dir)
    trials = {f.name: float(f.read_text()) for f in (cell / "sweeps" / "001" / "cpu").iterdir()}
    assert len(trials) == 1 and 5 < sum(trials.values()) < 30, trials  # the second trial never ran
    assert 5 < r.compute["sweep_cpu_s"] < 30 and r.compute["cpu_s"] >= 10, r.compute
    sweep = next(json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()
                 if json.loads(line)["tool"] == "sweep")
    assert {t["status"] for t in sweep["result"]["trials"]} == {"error"}, sweep["result"]
    assert not _left_cgroups()


def test_the_meter_integrates_only_the_chosen_devices(monkeypatch):
    """ComputeMeter on a fake NVML: three devices, one 50% busy and two 100%; the cell has one."""
    import sys
    import types

    from rlbench.sandbox.compute import ComputeMeter

    busy = {"h0": 100, "h1": 50, "h2": 100}
    fake = types.SimpleNamespace(
        nvmlInit=lambda: None, nvmlDeviceGetCount=lambda: 3, nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h[1]}-0000".encode(),
        nvmlDeviceGetUtilizationRates=lambda h: types.SimpleNamespace(gpu=busy[h]))
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-1")
    assert ComputeMeter()._gpu_handles == ["h1"]  # from the environment, matched by UUID
    assert ComputeMeter(devices=["2", "0"])._gpu_handles == ["h2", "h0"]
    meter = ComputeMeter(gpu_interval_s=0.02)
    meter.attach(os.getpid())
    t0 = time.monotonic()
    time.sleep(0.5)
    gpu_s, wall = meter.close()["gpu_s"], time.monotonic() - t0
    assert 0.5 * wall * 0.7 <= gpu_s <= 0.5 * wall * 1.05  # one device at 50%, not 2.5 devices' worth
