"""Which GPU device nodes a cell's sandbox gets: exactly the cell's own GPUs.

`bwrap --dev /dev` gives a sandbox a minimal /dev with no GPU in it. A cell that Ray gave GPUs
(`num_gpus`) finds them in CUDA_VISIBLE_DEVICES; its sandbox gets the driver's shared nodes
(/dev/nvidiactl, /dev/nvidia-uvm, ...) and the /dev/nvidiaN node of each of those GPUs, and no
other GPU's, the way NVIDIA's container runtime exposes a device to a container. Inside, CUDA then
numbers the cell's GPUs from 0, so CUDA_VISIBLE_DEVICES is not passed in (its host indices would
name devices the sandbox does not have).

CUDA_VISIBLE_DEVICES holds indices (NVML's order, which is PCI bus order) or UUIDs (`GPU-...`).
Both are mapped to the device node's minor number through the driver's own records,
/proc/driver/nvidia/gpus/<pci bus id>/information ("Device Minor:", "GPU UUID:"), never by
assuming that index N is /dev/nvidiaN.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

SHARED_NODES = ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset")


@dataclass(frozen=True)
class Gpu:
    pci: str  # the bus id, the folder's name: NVML's index order
    minor: int  # /dev/nvidia<minor>
    uuid: str


class GpuUnavailable(RuntimeError):
    """CUDA_VISIBLE_DEVICES names a GPU the driver does not list: the cell cannot have it."""


def driver_gpus(proc: Path = Path("/proc/driver/nvidia/gpus")) -> list[Gpu]:
    """The GPUs the NVIDIA driver lists, in PCI bus order (NVML's index order)."""
    out = []
    for folder in sorted(proc.iterdir()) if proc.is_dir() else []:
        fields = {}
        info = folder / "information"
        for line in info.read_text().splitlines() if info.is_file() else []:
            key, _, value = line.partition(":")
            fields[key.strip()] = value.strip()
        if "Device Minor" in fields:
            out.append(Gpu(folder.name.lower(), int(fields["Device Minor"]), fields.get("GPU UUID", "")))
    return out


def cell_gpus(visible: str | None, proc: Path = Path("/proc/driver/nvidia/gpus")) -> list[Gpu]:
    """The GPUs `visible` (a CUDA_VISIBLE_DEVICES value) names; none when it is unset or empty, or
    where no NVIDIA driver lists any GPU."""
    if visible is None or not visible.strip() or visible.strip() == "-1":
        return []
    gpus = driver_gpus(proc)
    if not gpus:  # no NVIDIA driver here (a CPU machine where the variable is set anyway): nothing to give
        return []
    chosen = []
    for item in (v.strip() for v in visible.split(",") if v.strip()):
        if item.isdigit():
            if int(item) >= len(gpus):
                raise GpuUnavailable(f"CUDA_VISIBLE_DEVICES names GPU {item}; the driver lists {len(gpus)}")
            chosen.append(gpus[int(item)])
        else:
            match = [g for g in gpus if g.uuid == item or (item.startswith("GPU-") and g.uuid.startswith(item))]
            if len(match) != 1:
                raise GpuUnavailable(f"CUDA_VISIBLE_DEVICES names {item!r}, which the driver does not list once")
            chosen.append(match[0])
    return chosen


def device_binds(gpus: list[Gpu], dev: Path = Path("/dev")) -> list[str]:
    """bwrap arguments giving the sandbox these GPUs' nodes and the driver's shared ones."""
    if not gpus:
        return []
    nodes = [dev / name for name in SHARED_NODES] + [dev / f"nvidia{g.minor}" for g in gpus]
    args: list[str] = []
    for node in nodes:
        if node.exists():
            args += ["--dev-bind", str(node), f"/dev/{node.name}"]
    return args


def assigned_gpus(proc: Path = Path("/proc/driver/nvidia/gpus")) -> str:
    """This process's GPUs as a CUDA_VISIBLE_DEVICES value, to hand to the process that builds the
    sandbox (the agent's actor, which reserves no GPU of its own): Ray's assignment to the cell, or
    every GPU the driver lists where nothing narrowed them (a cell run outside a suite)."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is not None:
        return value
    return ",".join(str(i) for i in range(len(driver_gpus(proc))))
