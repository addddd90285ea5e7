"""Joining Ray: one place decides between a cluster (RAY_ADDRESS) and an embedded local one."""

from __future__ import annotations

import os
from typing import Any


def ensure_ray(min_cpus: int = 0, log_to_driver: bool = False) -> None:
    """Start or join Ray once per process. With RAY_ADDRESS set, join that cluster as it is;
    otherwise start an embedded cluster with this machine's cores (at least `min_cpus`, so a
    request that needs more than the machine has still schedules). That one is always fresh
    (address="local"): a bare ray.init() joins any cluster `ray start` left on this machine
    (/tmp/ray/ray_current_cluster), refuses num_cpus there, and so every later run failed."""
    import ray

    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"include_dashboard": False, "log_to_driver": log_to_driver}
    if not os.environ.get("RAY_ADDRESS"):
        kwargs.update(address="local", num_cpus=max(min_cpus, os.cpu_count() or 2))
    ray.init(**kwargs)
