"""Exact numeric answers under a declared extraction convention (real datasets: GSM8K, MATH).

`exact_int` reads the first integer after a marker, which suits the generated arithmetic tasks but
scores real datasets wrongly: a GSM8K gold answer is a whole solution ending `#### 72`, models
without a marker put the answer last, and "3.50" or "$1,234.5" are answers too. Here the task says
how to find the answer in the completion (`extract`) and in its gold field (`answer_extract`), and
the two are compared as exact numbers.
"""

from __future__ import annotations

import re
from typing import Any

from rlbench.config.core import ConfigError, check
from rlbench.rewards.extract import check_extractor, extract as find_answer, parse_number


def exact_number(completion: str, answer: str, extract: str = "last_number", answer_extract: str = "",
                 pattern: str = "") -> float:
    """1.0 when the number `extract` finds in the completion equals the gold's exactly (72 ==
    72.0 == "72.00"), else 0.0. `answer_extract` empty: the gold is the answer itself; `gsm8k`
    reads a GSM8K solution's `#### N`. `pattern` is the regex extractor's, on either side."""
    got = parse_number(_extract(extract, str(completion), pattern))
    if got is None:
        return 0.0
    gold = str(answer) if not answer_extract else _extract(answer_extract, str(answer), pattern)
    want = parse_number(gold)
    return 1.0 if want is not None and got == want else 0.0


def _extract(name: str, text: str, pattern: str) -> str | None:
    return find_answer(name, text, pattern=pattern) if name == "regex" else find_answer(name, text)


def check_exact_number(extract: Any = "last_number", answer_extract: Any = "", pattern: Any = "") -> None:
    """The task spec's `reward.params` for exact_number, checked when the task loads: known
    extractor names, and a `pattern` that compiles exactly when one of them is `regex` (a pattern
    no extractor reads is a typo that would silently change nothing)."""
    check_extractor(extract, "reward.params.extract")
    if answer_extract != "":
        check_extractor(answer_extract, "reward.params.answer_extract")
    uses_regex = "regex" in (extract, answer_extract)
    check(isinstance(pattern, str), "reward.params.pattern", pattern, "a regular expression (a string)")
    if not uses_regex:
        check(pattern == "", "reward.params.pattern", pattern, "empty unless extract or answer_extract is regex")
        return
    check(pattern != "", "reward.params.pattern", pattern, "a regular expression when an extractor is regex")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ConfigError(f"key 'reward.params.pattern': value '{pattern}' is not a regular expression: {exc}") from None
