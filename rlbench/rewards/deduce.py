"""Yes/no answers after an optional reasoning trace (the truth-tellers task).

A completion may reason before it answers: `TRACE;ANSWER`, where what follows the last `;` is the
answer (`y` or `n`). The verifier reads the answer only: whether the trace is right is the agent's
business (a reward on the trace's correctness or its format is one way to make the model reason;
`trace_kinds` parses it for that).
"""

from __future__ import annotations

import re
from typing import Any, Sequence

from rlbench.rewards.rates import rate

ANSWER_MARK = ";"
YES, NO = "y", "n"
TRUTH, LIAR = "T", "F"  # a trace writes each person, what it said and its kind in turn: `aTb-Fc+F;n`
_TRACE = re.compile(r"([a-z])([TF])((?:[a-z][+-][TF])*)")


def final_answer(completion: str) -> str:
    """`y`, `n`, or '' for none: the first character after the last `;` (the whole completion
    where there is none), after whitespace."""
    text = str(completion).rsplit(ANSWER_MARK, 1)[-1].strip()
    return text[:1] if text[:1] in (YES, NO) else ""


def yes_no(completion: str, answer: str) -> float:
    return 1.0 if final_answer(completion) == str(answer).strip() else 0.0


def trace_kinds(completion: str) -> list[tuple[str, bool]]:
    """The (person, kind) pairs a trace `aTb-Fc+F;...` writes, True for a truth-teller ([] where
    the completion has no well-formed trace: a lowercase name and `T` or `F`, then for each next
    person its name, `+` or `-`, and `T` or `F`)."""
    text = str(completion)
    if ANSWER_MARK not in text:
        return []
    m = _TRACE.fullmatch(text.rsplit(ANSWER_MARK, 1)[0].strip())
    if not m:
        return []
    rest = m.group(3)
    return [(m.group(1), m.group(2) == TRUTH)] + [(rest[i], rest[i + 2] == TRUTH) for i in range(0, len(rest), 3)]


def deduce_breakdown(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str]) -> dict[str, Any]:
    """How often the model reasoned first (`traced`: a well-formed trace before the answer), and
    how often it was right when it did and when it answered at once: what the reward alone does
    not show about a gain on a reasoning task."""
    traced = [(bool(trace_kinds(c)), yes_no(c, a)) for c, a in zip(completions, answers)]
    with_trace = [hit for t, hit in traced if t]
    at_once = [hit for t, hit in traced if not t]

    return {"n": len(traced), "traced": rate(sum(t for t, _ in traced), len(traced)),
            "accuracy_traced": rate(sum(with_trace), len(with_trace)), "accuracy_at_once": rate(sum(at_once), len(at_once))}


yes_no.breakdown = deduce_breakdown  # type: ignore[attr-defined]

__all__ = ["deduce_breakdown", "ANSWER_MARK", "LIAR", "NO", "TRUTH", "YES", "final_answer", "trace_kinds", "yes_no"]
