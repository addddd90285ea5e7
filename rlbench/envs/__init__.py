"""Environments a model acts in while it generates: tools whose outputs the harness, not the model,
writes into a completion. Looked up by name (`tools.name` of a task)."""

from __future__ import annotations

from rlbench.config.core import ConfigError
from rlbench.envs.calculator import Calculator
from rlbench.envs.textgame import TextGame

_TOOLS: dict[str, type] = {"calculator": Calculator, "textgame": TextGame}


def tool_args(task) -> dict:
    """What a task's tool adds to every generate call (nothing for a task without one): the one
    place the harness's scoring and the pipelines take it from."""
    return {"tool": task.tools.name, "max_calls": task.tools.max_calls} if task.tools.name else {}


def tool_names() -> list[str]:
    return sorted(_TOOLS)


def get_tool(name: str) -> Calculator | TextGame:
    try:
        return _TOOLS[name]()
    except KeyError:
        raise ConfigError(f"key 'tools.name': value '{name}' is not allowed; allowed: {', '.join(tool_names())}") from None


__all__ = ["Calculator", "TextGame", "get_tool", "tool_args", "tool_names"]
