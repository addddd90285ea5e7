"""Rewards of completions that call a tool: the answer is what follows the last call."""

from __future__ import annotations

from rlbench.envs.calculator import Calculator
from rlbench.rewards.exact import exact_int


def calc_exact(completion: str, answer: str) -> float:
    """1.0 when the integer after the last calculator call (or the first integer, with no call)
    equals `answer`: the value the calculator wrote counts as the model's answer, the numbers it
    copied into the call do not."""
    return exact_int(Calculator.final_text(completion), answer)
