"""The agent interface. An agent gets the task description and a ToolBox, and acts only through
the tools: its Python code is the driver (an LLM loop, a scripted policy), trusted like harness
code; everything it does to the workspace goes through the sandboxed tools and is recorded."""

from __future__ import annotations

import abc
import importlib
from typing import TYPE_CHECKING, Any

from rlbench.config.core import ConfigError

if TYPE_CHECKING:
    from rlbench.harness.tools import ToolBox

BUILTIN = {
    "null": "rlbench.agents.null:NullAgent",
    "reference": "rlbench.agents.reference:ReferenceAgent",
    "react": "rlbench.agents.react:ReactAgent",
    "replay": "rlbench.agents.replay:ReplayAgent",
    "command": "rlbench.agents.command:CommandAgent",
}


class Agent(abc.ABC):
    name = "agent"

    def __init__(self, **options: Any):
        self.options = options

    @abc.abstractmethod
    def run(self, description: str, tools: ToolBox) -> None:
        """Work on the task through `tools` (a rlbench.harness.tools.ToolBox) until done."""


def resolve_agent(spec: str, options: dict[str, Any] | None = None) -> Agent:
    """A built-in name, a coding-agent CLI of rlbench/agents/clis.yaml, or `package.module:Class`."""
    from rlbench.agents.cli_registry import registry

    if spec in registry():
        from rlbench.agents.cli_agent import CliAgent

        return CliAgent(spec, **(options or {}))
    target = BUILTIN.get(spec, spec)
    if ":" not in target:
        raise ConfigError(f"unknown agent '{spec}'; built in: {', '.join(BUILTIN)}; coding-agent CLIs: "
                          f"{', '.join(registry())}; or give module:Class")
    module, _, cls = target.partition(":")
    try:
        agent_cls = getattr(importlib.import_module(module), cls)
    except (ImportError, AttributeError) as exc:
        raise ConfigError(f"cannot load agent '{spec}': {exc}") from exc
    if not (isinstance(agent_cls, type) and issubclass(agent_cls, Agent)):
        raise ConfigError(f"agent '{spec}' is not a subclass of rlbench.agents.Agent")
    return agent_cls(**(options or {}))


def check_agent(spec: str, options: dict[str, Any] | None = None) -> None:
    """Refuse an agent before a cell starts: it resolves, a coding-agent CLI is installed, has its
    keys in the environment and valid options, a react agent's options load and its driver model
    (if any) is there with vLLM to serve it."""
    from rlbench.agents.cli_registry import registry

    if spec in registry():
        from rlbench.agents.cli_agent import preflight

        preflight(spec, dict(options or {}))
        return
    resolve_agent(spec)
    if spec == "react":
        from rlbench.agents.model_server import check_driver
        from rlbench.agents.react import ReactConfig
        from rlbench.config.core import load_config

        load_config(ReactConfig, dict(options or {}), source_name="agent_options")
        check_driver(dict(options or {}))
    if spec == "command":
        import os

        missing = [str(k) for k in (options or {}).get("keys") or [] if not os.environ.get(str(k))]
        if missing:
            raise ConfigError(f"agent=command: agent_options.keys names {', '.join(missing)}, not set in the "
                              "environment the harness runs in")


def agent_keys(spec: str, options: dict[str, Any] | None = None) -> dict[str, str]:
    """The API keys an LLM agent reads, from this (the cell driver's) environment: handed to the
    agent's process through its Ray runtime_env, so a key set where the harness starts reaches an
    agent on any node, and never goes into a config, a result or a workspace."""
    import os

    from rlbench.agents.cli_registry import registry

    if spec in registry():
        names = registry()[spec].keys
    elif spec == "react":
        names = [str((options or {}).get("api_key_env") or "OPENAI_API_KEY")]
    elif spec == "command":
        names = [str(k) for k in (options or {}).get("keys") or []]
    else:
        return {}
    return {n: os.environ[n] for n in names if os.environ.get(n)}
