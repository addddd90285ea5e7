"""Rewards of completions written with a tool or in an environment."""

from __future__ import annotations

from rlbench.envs.calculator import Calculator
from rlbench.envs.textgame import TextGame, prompt_of, replay
from rlbench.rewards.exact import exact_int


def calc_exact(completion: str, answer: str) -> float:
    """1.0 when the integer after the last calculator call (or the first integer, with no call)
    equals `answer`: the value the calculator wrote counts as the model's answer, the numbers it
    copied into the call do not."""
    return exact_int(Calculator.final_text(completion), answer)


def game_win(completion: str, answer: str) -> float:
    """1.0 when the completion's actions, replayed on the game `answer` (`GAME.ROOMS`), open the
    door within the action limit, with every observation between them the environment's own."""
    try:
        game, rooms = (int(x) for x in str(answer).split("."))
        st, consistent = replay(prompt_of(game, rooms), completion, TextGame.max_actions)
    except (ValueError, KeyError):
        return 0.0
    return 1.0 if st.won and consistent else 0.0
