"""The floor: submit the base model unchanged. Its gain is zero by construction (the same weights
are scored on the same prompts), so any agent's gain reads against it."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlbench.agents.base import Agent

if TYPE_CHECKING:
    from rlbench.harness.tools import ToolBox


class NullAgent(Agent):
    name = "null"

    def run(self, description: str, tools: ToolBox) -> None:
        tools.submit("model")
