"""What a cell's agent spends: wall time, CPU seconds, and GPU seconds where NVML is present.

CPU seconds are the agent process's own plus those of every command it ran and waited for (the
sandbox's processes are its children), read with psutil from the driver, so an agent cannot
under-report them; plus the CPU seconds of the sweeps the harness ran for it, which their Tune
workers measure the same way (rlbench/tune/sweep.py) and the cell adds when a sweep ends.
GPU seconds integrate NVML's utilisation of the node's devices (a device 50% busy for 10 s is 5
GPU seconds); without NVML they are reported as absent, never as zero.
"""

from __future__ import annotations

import contextlib
import threading
import time
from typing import Any


class ComputeMeter:
    def __init__(self, gpu_interval_s: float = 1.0):
        self._proc: Any = None
        self._last_cpu = 0.0
        self._sweep_cpu = 0.0
        self._gpu_s = 0.0
        self._gpu_handles: list[Any] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._interval = gpu_interval_s
        self._nvml = self._init_nvml()

    def _init_nvml(self) -> Any:
        try:
            import pynvml  # nvidia-ml-py; present on GPU machines

            pynvml.nvmlInit()
            self._gpu_handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(pynvml.nvmlDeviceGetCount())]
            return pynvml if self._gpu_handles else None
        except Exception:  # noqa: BLE001 - no NVML, no GPU, or no driver: GPU seconds stay absent
            return None

    def attach(self, pid: int) -> None:
        """Meter the agent's process (and its children) from now on."""
        import psutil

        self._proc = psutil.Process(pid)
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

    def cpu_seconds(self) -> float:
        """The agent tree's CPU seconds so far; the last reading once the process is gone."""
        import psutil

        if self._proc is not None:
            with contextlib.suppress(psutil.Error):  # the agent process ended: its last reading stands
                t = self._proc.cpu_times()
                self._last_cpu = t.user + t.system + t.children_user + t.children_system
        return self._last_cpu

    def add_sweep(self, cpu_s: float) -> None:
        self._sweep_cpu += float(cpu_s or 0.0)

    def sample(self) -> dict[str, Any]:
        return {"cpu_s": round(self.cpu_seconds() + self._sweep_cpu, 2), "sweep_cpu_s": round(self._sweep_cpu, 2),
                "gpu_s": round(self._gpu_s, 2) if self._nvml is not None else None}

    def close(self) -> dict[str, Any]:
        final = self.sample()
        self._stop.set()
        return final
