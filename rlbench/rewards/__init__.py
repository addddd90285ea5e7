"""Verifiable rewards: `fn(completion, answer, **params) -> float`, looked up by name."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Mapping

from rlbench.config.core import ConfigError
from rlbench.rewards.exact import exact_int
from rlbench.rewards.graded import int_closeness
from rlbench.rewards.number import check_exact_number, exact_number
from rlbench.rewards.text import exact_text
from rlbench.rewards.tool import calc_exact, game_win

RewardFn = Callable[..., float]

_REWARDS: dict[str, RewardFn] = {"exact_int": exact_int, "int_closeness": int_closeness, "exact_text": exact_text,
                                 "calc_exact": calc_exact, "game_win": game_win, "exact_number": exact_number}
# rewards whose params need more than a known name: checked when the task loads, before any work
_PARAM_CHECKS: dict[str, Callable[..., None]] = {"exact_number": check_exact_number}


def get_reward(name: str) -> RewardFn:
    try:
        return _REWARDS[name]
    except KeyError:
        raise ConfigError(
            f"key 'reward.name': value '{name}' is not allowed; allowed: {', '.join(sorted(_REWARDS))}"
        ) from None


def reward_params(name: str) -> list[str]:
    """The params reward `name` accepts from `reward.params`: its keywords after (completion, answer)."""
    return list(inspect.signature(get_reward(name)).parameters)[2:]


def check_reward(name: str, params: Mapping[str, Any]) -> None:
    """A task's `reward.name` and `reward.params`, checked when its spec is validated: every caller
    runs `get_reward(name)(completion, answer, **params)`, so an unknown param would otherwise
    fail as a TypeError on the first completion scored, minutes into a cell."""
    allowed = reward_params(name)
    for key in params:
        if key not in allowed:
            raise ConfigError(f"key 'reward.params.{key}': not a param of reward '{name}'; "
                              f"allowed: {', '.join(allowed) or '(none)'}")
    if name in _PARAM_CHECKS:
        _PARAM_CHECKS[name](**params)


__all__ = ["RewardFn", "get_reward", "check_reward", "reward_params", "exact_int", "int_closeness", "exact_text",
           "calc_exact", "game_win", "exact_number"]
