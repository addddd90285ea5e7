"""From `rlbench run key=value ...` to the list of cells to run.

`agent`, `task`, `seed` name one cell; `agents`, `tasks`, `seeds` (lists) expand to every
combination. Cells run one after another here; the Ray suite orchestrator runs them in parallel.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import Iterable

from rlbench.config.core import load_config
from rlbench.harness.cell import CellConfig


@dataclass
class RunSpec(CellConfig):
    agents: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)


def load_run_spec(overrides: Iterable[str]) -> RunSpec:
    return load_config(RunSpec, None, overrides=overrides, source_name="rlbench run")


def expand(spec: RunSpec) -> list[CellConfig]:
    cells = []
    base = {k: copy.deepcopy(getattr(spec, k)) for k in CellConfig.__dataclass_fields__}
    for agent in spec.agents or [spec.agent]:
        for task in spec.tasks or [spec.task]:
            for seed in spec.seeds or [spec.seed]:
                cell = CellConfig(**{**base, "agent": agent, "task": task, "seed": seed})
                cell.validate()
                cells.append(cell)
    return cells
