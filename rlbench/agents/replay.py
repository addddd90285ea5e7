"""`replay`: the tool calls of a recorded trajectory, in order, for deterministic reruns.

`agent_options.trajectory=PATH` names a cell's trajectory.jsonl (arguments are recorded whole).
Commands run again in a fresh workspace, so a rerun shows whether a result reproduces; calls that
were refused for the budget are replayed as well, and whatever they do now is what counts. Every
tool the registry (rlbench/harness/tool_registry.py) marks replayable is repeated, `claim` included."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlbench.agents.base import Agent
from rlbench.config.core import ConfigError
from rlbench.harness.tools import TOOL_SPECS
from rlbench.record import read_trajectory

if TYPE_CHECKING:
    from rlbench.harness.tools import ToolBox

REPLAYABLE = frozenset(spec.name for spec in TOOL_SPECS if spec.replayable)


class ReplayAgent(Agent):
    name = "replay"

    def run(self, description: str, tools: ToolBox) -> None:
        path = Path(str(self.options.get("trajectory", "")))
        if not path.is_file():
            raise ConfigError(f"replay: agent_options.trajectory={path} is not a trajectory.jsonl file")
        for step in read_trajectory(path):
            if step.get("tool") in REPLAYABLE:
                getattr(tools, step["tool"])(**(step.get("args") or {}))
