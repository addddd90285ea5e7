"""Code generation rewards: a completion passes when its code passes the problem's unit tests.

The answer of a code item is a test program (MBPP's asserts, HumanEval's `check(candidate)` and
its call). The completion's code is what a chat model writes in its first fenced block (or the
whole completion where it writes none); the program is that code followed by the tests, and it
scores 1.0 when it exits 0 within the limits, run in a sandbox of its own
(rlbench/sandbox/program.py): the code is the model's, and the model's is the agent's.

An answer may hold a part that goes before the code, above a line `COMPLETION_MARK`: HumanEval's
prompt (its imports, its helper functions, the function's stub) comes first, so the completion's
own definition replaces the stub and a completion that omits an import the prompt made still runs.
"""

from __future__ import annotations

import re
from typing import Sequence

from rlbench.config.core import check
from rlbench.sandbox.program import ProgramLimits, run_many

COMPLETION_MARK = "# rlbench: the completion's code goes here"
# A completion's code is read from its first fenced block: ```python, ```py, ```Python3 or a bare ```.
_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:```|\Z)", re.IGNORECASE | re.DOTALL)
MAX_CODE_CHARS = 64 * 1024  # a completion's code beyond this is not a solution of a benchmark problem


def code_of(completion: str) -> str:
    """The code of a completion: its first fenced block (to the end where the fence never closes,
    as when generation stops at the token limit), else the whole completion."""
    text = str(completion)
    m = _FENCE.search(text)
    return (m.group(1) if m else text)[:MAX_CODE_CHARS]


def program(completion: str, answer: str) -> str:
    """The program a completion is scored by: the answer's part above COMPLETION_MARK, the code,
    then the tests."""
    before, mark, tests = str(answer).partition(COMPLETION_MARK)
    if not mark:
        before, tests = "", before
    return f"{before}\n{code_of(completion)}\n\n{tests}\n"


def unit_tests(completion: str, answer: str, timeout_s: float = 10.0, memory_mb: int = 1024) -> float:
    """1.0 when the completion's code passes the answer's tests in the program sandbox, else 0.0
    (a failed assert, a crash, a timeout, a limit hit)."""
    return unit_tests_batch([completion], [answer], timeout_s=timeout_s, memory_mb=memory_mb)[0]


def unit_tests_batch(completions: Sequence[str], answers: Sequence[str], timeout_s: float = 10.0,
                     memory_mb: int = 1024) -> list[float]:
    """`unit_tests` for many completions, their programs run side by side."""
    limits = ProgramLimits(timeout_s=float(timeout_s), memory_mb=int(memory_mb))
    results = run_many([program(c, a) for c, a in zip(completions, answers)], limits)
    return [1.0 if r.passed else 0.0 for r in results]


def check_unit_tests(timeout_s: object = 10.0, memory_mb: object = 1024) -> None:
    """The task spec's `reward.params` for unit_tests, checked when the task loads."""
    check(isinstance(timeout_s, (int, float)) and 0 < float(timeout_s) <= 60, "reward.params.timeout_s", timeout_s,
          "seconds in (0, 60]")
    check(isinstance(memory_mb, int) and 64 <= memory_mb <= 16384, "reward.params.memory_mb", memory_mb,
          "an integer in [64, 16384]")


unit_tests.batch = unit_tests_batch  # type: ignore[attr-defined]

__all__ = ["COMPLETION_MARK", "check_unit_tests", "code_of", "program", "unit_tests", "unit_tests_batch"]
