"""Verifiable rewards: `fn(completion, answer, **params) -> float`, looked up by name."""

from __future__ import annotations

from typing import Callable

from rlbench.config.core import ConfigError
from rlbench.rewards.exact import exact_int
from rlbench.rewards.graded import int_closeness
from rlbench.rewards.text import exact_text
from rlbench.rewards.tool import calc_exact, game_win

RewardFn = Callable[..., float]

_REWARDS: dict[str, RewardFn] = {"exact_int": exact_int, "int_closeness": int_closeness, "exact_text": exact_text,
                                 "calc_exact": calc_exact, "game_win": game_win}


def get_reward(name: str) -> RewardFn:
    try:
        return _REWARDS[name]
    except KeyError:
        raise ConfigError(
            f"key 'reward.name': value '{name}' is not allowed; allowed: {', '.join(sorted(_REWARDS))}"
        ) from None


__all__ = ["RewardFn", "get_reward", "exact_int", "int_closeness", "exact_text", "calc_exact", "game_win"]
