"""Agents: the null floor, the reference ceiling, and whatever `module:Class` names."""

from rlbench.agents.base import Agent, resolve_agent

__all__ = ["Agent", "resolve_agent"]
