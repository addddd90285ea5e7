"""Task features: the behaviours a task may have, one module each (rlbench/features/base.py says
why and what the hooks are). FEATURES is the one list; its order is the order of their paragraphs
in the workspace's description."""

from __future__ import annotations

from rlbench.features.base import GraderContext, JudgeContext, TaskFeature
from rlbench.features.baseline_config import BaselineConfiguration
from rlbench.features.claims import Claims
from rlbench.features.debug import Debug
from rlbench.features.kl_limit import KLLimit
from rlbench.features.reward_endpoint import RewardEndpoint
from rlbench.features.sweeps import Sweeps
from rlbench.features.tool_env import ToolEnvironment
from rlbench.tasks.spec import TaskConfig

FEATURES: tuple[TaskFeature, ...] = (RewardEndpoint(), Claims(), Sweeps(), BaselineConfiguration(), Debug(),
                                     ToolEnvironment(), KLLimit())

__all__ = ["FEATURES", "GraderContext", "JudgeContext", "TaskFeature", "active"]


def active(task: TaskConfig) -> tuple[TaskFeature, ...]:
    """The features `task` has, in FEATURES order."""
    return tuple(f for f in FEATURES if f.applies(task))
