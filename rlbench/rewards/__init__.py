"""Verifiable rewards: `fn(completion, answer, **params) -> float`, looked up by name."""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Mapping, Sequence

from rlbench.config.core import ConfigError
from rlbench.rewards.code import check_unit_tests, unit_tests
from rlbench.rewards.deduce import yes_no
from rlbench.rewards.exact import exact_int
from rlbench.rewards.graded import int_closeness
from rlbench.rewards.harmless import refuse_or_answer
from rlbench.rewards.honest import honest_int
from rlbench.rewards.instructions import check_if_instructions, check_instruction_answers, if_instructions
from rlbench.rewards.skills import skill_exact
from rlbench.rewards.listops import list_program
from rlbench.rewards.number import check_exact_number, exact_number
from rlbench.rewards.text import exact_text
from rlbench.rewards.tool import calc_exact, game_win

RewardFn = Callable[..., float]

_REWARDS: dict[str, RewardFn] = {"exact_int": exact_int, "int_closeness": int_closeness, "exact_text": exact_text,
                                 "calc_exact": calc_exact, "game_win": game_win, "exact_number": exact_number,
                                 "unit_tests": unit_tests, "if_instructions": if_instructions,
                                 "honest_int": honest_int, "skill_exact": skill_exact, "list_program": list_program,
                                 "refuse_or_answer": refuse_or_answer, "yes_no": yes_no}
# rewards whose params need more than a known name: checked when the task loads, before any work
_PARAM_CHECKS: dict[str, Callable[..., None]] = {"exact_number": check_exact_number, "unit_tests": check_unit_tests,
                                                 "if_instructions": check_if_instructions,
                                                 "list_program": check_unit_tests}  # the same limits, a program each
# rewards whose items' answers must be checked against this machine when a task's splits are
# built or loaded (a malformed answer, or data a checker needs and the machine lacks)
_ANSWER_CHECKS: dict[str, Callable[[Iterable[tuple[str, Any]]], None]] = {"if_instructions": check_instruction_answers}


# rewards whose `answer` is itself a right completion (a number, a text), so that SFT on the train
# answers teaches the task; the others' answers are what a completion is checked against (unit
# tests, a game's id, instruction parameters) and a model trained to write them learns nothing
_COMPLETION_ANSWERS = frozenset({"exact_int", "int_closeness", "exact_text", "calc_exact", "exact_number",
                                 "honest_int", "skill_exact", "refuse_or_answer"})
# not `yes_no`: its answer is a right completion, but SFT on a bare `y`/`n` teaches a reasoning
# task's model to answer at once, the habit RL there has to break (truth-tellers)


def answer_is_completion(name: str) -> bool:
    return name in _COMPLETION_ANSWERS


def get_reward(name: str) -> RewardFn:
    try:
        return _REWARDS[name]
    except KeyError:
        raise ConfigError(
            f"key 'reward.name': value '{name}' is not allowed; allowed: {', '.join(sorted(_REWARDS))}"
        ) from None


def score_many(name: str, params: Mapping[str, Any], texts: Sequence[str], answers: Sequence[Any]) -> list[float]:
    """Reward `name` for each (completion, answer) pair, in order. Every caller that scores a batch
    (evaluation, the reward endpoint, the SDK) comes here: a reward with a batch form (`fn.batch`,
    e.g. unit_tests, whose programs run side by side) uses it, the others are called one by one."""
    if len(texts) != len(answers):
        raise ValueError(f"{len(texts)} completions for {len(answers)} answers")
    fn = get_reward(name)
    batch = getattr(fn, "batch", None)
    if batch is not None:
        return [float(r) for r in batch(list(texts), list(answers), **params)]
    return [float(fn(t, a, **params)) for t, a in zip(texts, answers)]


def reward_breakdown(name: str, params: Mapping[str, Any], prompts: Sequence[str], texts: Sequence[str],
                     answers: Sequence[Any]) -> dict[str, Any] | None:
    """What a reward reports beside its mean (`fn.breakdown(prompts, completions, answers)`: e.g.
    honest_int's calibration, how often the unanswerable was answered; skill_exact's score per
    skill), or None for a reward that reports nothing more."""
    breakdown = getattr(get_reward(name), "breakdown", None)
    return None if breakdown is None else breakdown(list(prompts), list(texts), list(answers), **params)


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


def check_answers(name: str, splits: Mapping[str, Sequence[Mapping[str, Any]]]) -> None:
    """A task's items checked against its reward on this machine, before any cell scores them
    (ConfigError with the reason); rewards that need no check pass every item."""
    if name in _ANSWER_CHECKS:
        _ANSWER_CHECKS[name]((split, item["answer"]) for split, items in splits.items() for item in items)


__all__ = ["RewardFn", "get_reward", "score_many", "unit_tests", "if_instructions", "check_reward", "answer_is_completion", "check_answers", "reward_breakdown", "reward_params", "honest_int", "skill_exact", "list_program", "refuse_or_answer", "yes_no", "exact_int", "int_closeness", "exact_text",
           "calc_exact", "game_win", "exact_number"]
