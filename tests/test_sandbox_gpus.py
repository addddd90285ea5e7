"""A cell's sandbox gets exactly the cell's GPUs: the driver's shared nodes and /dev/nvidiaN of each
GPU CUDA_VISIBLE_DEVICES names, mapped through the driver's own records (not index N = nvidiaN).
Tested on a /proc/driver/nvidia and /dev laid out as the NVIDIA driver lays them out; the real
devices are checked by scripts/gpu_check.py on a GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlbench.sandbox.gpus import GpuUnavailable, assigned_gpus, cell_gpus, device_binds, driver_gpus


def _driver(tmp_path: Path) -> tuple[Path, Path]:
    """Two GPUs whose minors run against PCI order (as on some boards), the driver's shared nodes."""
    proc, dev = tmp_path / "proc", tmp_path / "dev"
    for pci, minor, uuid in (("0000:1a:00.0", 1, "GPU-aaaa1111-0000"), ("0000:3b:00.0", 0, "GPU-bbbb2222-0000")):
        (proc / pci).mkdir(parents=True)
        (proc / pci / "information").write_text(
            f"Model: \t\t NVIDIA H100 80GB HBM3\nIRQ:   \t\t 16\nGPU UUID: \t {uuid}\nVideo BIOS: \t 96.00.99.00.01\n"
            f"Bus Type: \t PCIe\nDMA Size: \t 52 bits\nDMA Mask: \t 0xfffffffffffff\nBus Location: \t {pci}\n"
            f"Device Minor: \t {minor}\nGPU Excluded:\t No\n")
    dev.mkdir()
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0", "nvidia1"):
        (dev / name).touch()
    return proc, dev


def test_a_cell_gets_its_own_gpus_nodes_and_no_other(tmp_path):
    proc, dev = _driver(tmp_path)
    assert [g.minor for g in driver_gpus(proc)] == [1, 0]  # PCI order, the minor from the driver
    second = cell_gpus("1", proc)
    assert [g.minor for g in second] == [0]
    args = device_binds(second, dev)
    bound = args[1::3]
    assert args[0::3] == ["--dev-bind"] * len(bound)
    assert [Path(b).name for b in bound] == ["nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia0"]
    assert [g.minor for g in cell_gpus("GPU-aaaa1111", proc)] == [1]  # a UUID prefix, as CUDA accepts
    assert [g.minor for g in cell_gpus("0,1", proc)] == [1, 0]


def test_no_gpus_where_none_is_named_or_no_driver_lists_any(tmp_path):
    proc, dev = _driver(tmp_path)
    for visible in (None, "", "-1"):
        assert cell_gpus(visible, proc) == [] and device_binds([], dev) == []
    assert cell_gpus("0", tmp_path / "no-driver") == []  # CUDA_VISIBLE_DEVICES=0 on a CPU machine
    with pytest.raises(GpuUnavailable, match="GPU 2"):
        cell_gpus("2", proc)
    with pytest.raises(GpuUnavailable, match="GPU-cccc"):
        cell_gpus("GPU-cccc", proc)


def test_the_agent_actor_is_handed_the_cells_gpus(tmp_path, monkeypatch):
    proc, _ = _driver(tmp_path)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert assigned_gpus(proc) == "1"  # Ray's assignment to the cell
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert assigned_gpus(proc) == "0,1"  # nothing narrowed them: every GPU the driver lists
    assert assigned_gpus(tmp_path / "no-driver") == ""


def test_a_sandbox_without_gpus_says_so_to_deepspeed(tmp_path):
    from rlbench.sandbox.runner import Sandbox, SandboxConfig

    (tmp_path / "ws").mkdir()
    box = Sandbox(tmp_path / "ws", SandboxConfig(mode="bwrap"), 60, 1, visible_gpus="")
    assert box.gpus == [] and box.env()["DS_ACCELERATOR"] == "cpu" and "CUDA_VISIBLE_DEVICES" not in box.env()
    assert not any(a == "--dev-bind" for a in box._bwrap_args())


def test_a_gpu_tasks_robustness_reruns_reserve_the_cells_gpus():
    """A rerun of a GPU cell's recipe is a Ray task that reserves GPUs as the cell did (the suite
    passes its cell_gpus; at least one wherever the harness scores on cuda), so Ray narrows its
    CUDA_VISIBLE_DEVICES and its sandbox shows those devices; a CPU task's reruns reserve none."""
    from rlbench.robustness.rerun import RobustnessConfig

    assert RobustnessConfig().resources(2) == {"num_cpus": 2}
    assert RobustnessConfig(device="cuda").resources(8) == {"num_cpus": 8, "num_gpus": 1.0}
    assert RobustnessConfig(device="cuda", gpus=2).resources(8) == {"num_cpus": 8, "num_gpus": 2}
    assert RobustnessConfig(gpus=0.5).resources(4) == {"num_cpus": 4, "num_gpus": 0.5}
