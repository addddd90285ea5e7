"""Exact integer answers, parsed forgivingly from what a model actually writes."""

from __future__ import annotations

import re

from rlbench.rewards.extract import MAX_NUMBER_CHARS, after_last_marker


def parse_int_answer(completion: str) -> int | None:
    """The model's final answer: the first integer after an answer marker, else the first integer.

    Leading whitespace, trailing text (a model that keeps generating after its answer), thousands
    separators (`1,234`) and a trailing period are tolerated; an empty or number-free completion
    has no answer.
    """
    text = after_last_marker(completion.strip())  # the last marker wins
    match = re.search(r"[-+]?\d{1,3}(?:,\d{3})+(?!\d)|[-+]?\d+", text)
    if match is None or len(match.group(0)) > MAX_NUMBER_CHARS:  # int() refuses > 4,300 digits: no answer, not an error
        return None
    return int(match.group(0).replace(",", ""))


def parsed_pair(completion: str, answer: str) -> tuple[int, int] | None:
    """(the completion's integer, the answer's integer), or None when either has none: what every
    integer verifier compares."""
    got = parse_int_answer(completion)
    try:
        want = int(str(answer).strip())
    except ValueError:
        return None
    return None if got is None else (got, want)


def exact_int(completion: str, answer: str) -> float:
    """1.0 when the parsed final answer equals the integer `answer`, else 0.0."""
    pair = parsed_pair(completion, answer)
    return 1.0 if pair is not None and pair[0] == pair[1] else 0.0
