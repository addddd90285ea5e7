"""What a cell's agent spends: wall time, CPU seconds, and GPU seconds where NVML is present.

CPU seconds are the sum of three parts, none of which the agent reports itself:
- the agent process's own (its threads; not its children, which the next part counts), read with
  psutil from the driver;
- its commands', metered where they are spent: every sandboxed command runs in a cgroup of its own
  (or under a poller where no cgroup is writable; rlbench/sandbox/accounting.py), and the agent's
  ToolBox keeps the running total in SANDBOX_CPU_FILE in the cell folder (outside the workspace:
  nothing in the sandbox can write it), updated about every second while a command runs;
- the sweeps' trials', metered the same way in their Tune workers (rlbench/tune/sweep.py), which
  write each trial's running total to the sweep's folder about every second: the meter reads them
  live while a sweep runs (`watch_sweep`), so a CPU limit stops a sweep midway too.
GPU seconds integrate NVML's utilisation of the cell's own devices (a device 50% busy for 10 s is 5
GPU seconds; the devices are those of CUDA_VISIBLE_DEVICES or Ray's GPU ids for the cell, all of
the node's when neither says); without NVML they are reported as absent, never as zero.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

SANDBOX_CPU_FILE = "sandbox_cpu.json"  # in the cell folder: {"cpu_s": ..., "cpu_meter": ...}, written by the ToolBox
STOP_FILE = "stop_agent.txt"  # in the cell folder: written by the driver when a CPU or GPU limit is passed
TRIAL_CPU_DIR = "cpu"  # in a sweep's folder: one file per trial, its CPU seconds so far


def visible_device_ids(env: Mapping[str, str] | None = None, ray_ids: Sequence[Any] | None = None) -> list[str] | None:
    """The GPU ids the cell was given: Ray's ids for its task when it has any, else the entries
    of CUDA_VISIBLE_DEVICES up to the first one CUDA would not take (it ignores the rest too);
    None when neither is set (the cell may use every device)."""
    if ray_ids:
        return [str(i) for i in ray_ids]
    spec = (os.environ if env is None else env).get("CUDA_VISIBLE_DEVICES")
    if spec is None:
        return None
    ids = []
    for entry in (e.strip() for e in spec.split(",")):
        if not (re.fullmatch(r"\d+", entry) or entry.startswith(("GPU-", "MIG-"))):
            break
        ids.append(entry)
    return ids


def select_devices(devices: Sequence[tuple[int, str, Any]], wanted: Sequence[str] | None) -> list[Any]:
    """The handles, among `devices` as (NVML index, UUID, handle), of the ids in `wanted`: an
    index, or a UUID or a unique prefix of one (as CUDA_VISIBLE_DEVICES allows); every handle
    when `wanted` is None. An id that matches no device, or several, selects nothing."""
    if wanted is None:
        return [h for _, _, h in devices]
    chosen: list[Any] = []
    for want in wanted:
        if want.isdigit():
            hits = [h for i, _, h in devices if i == int(want)]
        else:
            hits = [h for _, uuid, h in devices if uuid.startswith(want)]
        if len(hits) == 1 and not any(h is hits[0] for h in chosen):
            chosen.append(hits[0])
    return chosen


def _ray_gpu_ids() -> list[Any]:
    """Ray's GPU ids of the task or actor this runs in ([] in a driver or outside Ray)."""
    try:
        import ray

        if not ray.is_initialized():
            return []
        ctx = ray.get_runtime_context()
        if ctx.get_task_id() is None and ctx.get_actor_id() is None:
            return []
        return list(ray.get_gpu_ids())
    except Exception:  # noqa: BLE001 - bookkeeping only
        return []


def over_limit(sample: Mapping[str, Any], cpu_limit_s: float, gpu_limit_s: float) -> str:
    """Why the cell must stop (a CPU or GPU seconds limit passed), or '' while within them; a
    limit of 0 is none, and GPU seconds that are not metered (no NVML) never pass."""
    cpu, gpu = sample.get("cpu_s"), sample.get("gpu_s")
    if cpu_limit_s > 0 and cpu is not None and cpu >= cpu_limit_s:
        return (f"the agent used {cpu:.0f} CPU seconds, past the cell's CPU limit of {cpu_limit_s:g} s "
                "(budget cpu_seconds)")
    if gpu_limit_s > 0 and gpu is not None and gpu >= gpu_limit_s:
        return (f"the agent used {gpu:.0f} GPU seconds, past the cell's GPU limit of {gpu_limit_s:g} s "
                "(budget gpu_seconds)")
    return ""


class ComputeMeter:
    def __init__(self, gpu_interval_s: float = 1.0, devices: Sequence[str] | None = None):
        """`devices`: the cell's GPU ids; None: found from Ray or CUDA_VISIBLE_DEVICES."""
        self._proc: Any = None
        self._sandbox_file: Path | None = None
        self._agent_cpu = 0.0
        self._sandbox_cpu = 0.0
        self._cpu_meter = ""
        self._sweep_cpu = 0.0
        self._live_sweep: Path | None = None
        self._gpu_s = 0.0
        self._gpu_handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = gpu_interval_s
        self._nvml = self._init_nvml(devices)

    def _init_nvml(self, devices_given: Sequence[str] | None) -> Any:
        try:
            import pynvml  # nvidia-ml-py; present on GPU machines

            pynvml.nvmlInit()
            wanted = visible_device_ids(ray_ids=_ray_gpu_ids()) if devices_given is None else list(devices_given)
            devices = []
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                uuid = pynvml.nvmlDeviceGetUUID(h)
                devices.append((i, uuid.decode() if isinstance(uuid, bytes) else str(uuid), h))
            if not devices:
                return None
            self._gpu_handles = select_devices(devices, wanted)  # none given to the cell: 0 GPU seconds
            return pynvml
        except Exception:  # noqa: BLE001 - no NVML, no GPU, or no driver: GPU seconds stay absent
            return None

    def attach(self, pid: int, sandbox_file: Path | None = None) -> None:
        """Meter the agent's process from now on, and the commands its ToolBox counts in `sandbox_file`."""
        import psutil

        self._proc = psutil.Process(pid)
        self._sandbox_file = sandbox_file
        if self._nvml is not None and self._thread is None:
            self._thread = threading.Thread(target=self._gpu_loop, daemon=True)
            self._thread.start()

    def _gpu_loop(self) -> None:
        last = time.monotonic()
        while not self._stop.wait(self._interval):
            now = time.monotonic()
            try:
                busy = sum(self._nvml.nvmlDeviceGetUtilizationRates(h).gpu for h in self._gpu_handles) / 100.0
            except Exception:  # noqa: BLE001 - a device that stops answering ends the metering
                return
            self._gpu_s += busy * (now - last)
            last = now

    def agent_cpu_seconds(self) -> float:
        """The agent process's own CPU seconds so far (its threads, not its children); the last
        reading once the process is gone."""
        import psutil

        if self._proc is not None:
            with contextlib.suppress(psutil.Error):  # the agent process ended: its last reading stands
                t = self._proc.cpu_times()
                self._agent_cpu = max(self._agent_cpu, t.user + t.system)
        return self._agent_cpu

    def sandbox_cpu_seconds(self) -> float:
        """The commands' CPU seconds as the ToolBox last wrote them; never less than before (a
        file being replaced, or unreadable, keeps the last reading)."""
        if self._sandbox_file is not None:
            with contextlib.suppress(OSError, ValueError, TypeError, AttributeError):
                record = json.loads(self._sandbox_file.read_text())
                self._sandbox_cpu = max(self._sandbox_cpu, float(record["cpu_s"]))
                self._cpu_meter = str(record.get("cpu_meter", ""))[:20]
        return self._sandbox_cpu

    def cpu_seconds(self) -> float:
        """The agent's and its commands' CPU seconds (not the sweeps')."""
        return self.agent_cpu_seconds() + self.sandbox_cpu_seconds()

    def watch_sweep(self, folder: Path) -> None:
        """A sweep started: its trials' CPU (TRIAL_CPU_DIR in `folder`) counts from now on, live."""
        self._live_sweep = Path(folder)

    def add_sweep(self, cpu_s: float) -> None:
        """A sweep ended with `cpu_s` in all: its final count replaces the live one."""
        self._sweep_cpu += float(cpu_s or 0.0)
        self._live_sweep = None

    def sweep_cpu_seconds(self) -> float:
        live = trial_cpu_total(self._live_sweep) if self._live_sweep is not None else 0.0
        return self._sweep_cpu + live

    def sample(self) -> dict[str, Any]:
        agent, sandbox, sweeps = self.agent_cpu_seconds(), self.sandbox_cpu_seconds(), self.sweep_cpu_seconds()
        return {"cpu_s": round(agent + sandbox + sweeps, 2), "agent_cpu_s": round(agent, 2),
                "sandbox_cpu_s": round(sandbox, 2), "sweep_cpu_s": round(sweeps, 2),
                "cpu_meter": self._cpu_meter or None,
                "gpu_s": round(self._gpu_s, 2) if self._nvml is not None else None}

    def close(self) -> dict[str, Any]:
        final = self.sample()
        self._stop.set()
        return final


def publish_sandbox_cpu(cell_dir: Path, cpu_s: float, method: str) -> None:
    """The ToolBox's side of SANDBOX_CPU_FILE: written whole (rename), so a reader never sees half."""
    from rlbench.io import atomic_write_json

    atomic_write_json(Path(cell_dir) / SANDBOX_CPU_FILE, {"cpu_s": round(float(cpu_s), 3), "cpu_meter": method})


def stop_reason(cell_dir: Path) -> str:
    """Why the driver stopped the cell's work (a CPU or GPU limit passed), or '': read by the
    agent's ToolBox and by every sweep trial, which kill their running command on it."""
    try:
        return (Path(cell_dir) / STOP_FILE).read_text()[:500] or "the cell's budget is spent"
    except OSError:
        return ""


def trial_cpu_total(sweep_folder: Path) -> float:
    """The CPU seconds of a sweep's trials so far, as their workers wrote them (a file being
    replaced or unreadable counts 0 this once)."""
    total = 0.0
    for f in (Path(sweep_folder) / TRIAL_CPU_DIR).glob("*"):
        try:
            total += float(f.read_text() or 0)
        except (OSError, ValueError):
            continue
    return round(total, 2)
