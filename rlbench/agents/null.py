"""The floor: submit the base model unchanged. Its gain is zero by construction (the same weights
are scored on the same prompts), so any agent's gain reads against it."""

from __future__ import annotations

from typing import Any

from rlbench.agents.base import Agent


class NullAgent(Agent):
    name = "null"

    def run(self, description: str, tools: Any) -> None:
        tools.submit("model")
