"""Yes/no answers after an optional reasoning trace (the truth-tellers task).

A completion may reason before it answers: `TRACE;ANSWER`, where what follows the last `;` is the
answer (`y` or `n`). The verifier reads the answer only: whether the trace is right is the agent's
business (a reward on the trace's correctness or its format is one way to make the model reason;
`trace_kinds` parses it for that).
"""

from __future__ import annotations

from typing import Any, Sequence

from rlbench.rewards.rates import rate

ANSWER_MARK = ";"
YES, NO = "y", "n"
TRUTH, LIAR = "T", "F"  # a trace writes each person and its kind in turn: `aTbFcF;n`


def final_answer(completion: str) -> str:
    """`y`, `n`, or '' for none: the first character after the last `;` (the whole completion
    where there is none), after whitespace."""
    text = str(completion).rsplit(ANSWER_MARK, 1)[-1].strip()
    return text[:1] if text[:1] in (YES, NO) else ""


def yes_no(completion: str, answer: str) -> float:
    return 1.0 if final_answer(completion) == str(answer).strip() else 0.0


def trace_kinds(completion: str) -> list[tuple[str, bool]]:
    """The (person, kind) pairs a trace `aTbFcF;...` writes, True for a truth-teller ([] where the
    completion has no well-formed trace: pairs of a lowercase name and `T` or `F`)."""
    text = str(completion)
    if ANSWER_MARK not in text:
        return []
    trace = text.rsplit(ANSWER_MARK, 1)[0].strip()
    pairs = [trace[i:i + 2] for i in range(0, len(trace), 2)]
    if not pairs or any(len(p) != 2 or not p[0].islower() or p[1] not in (TRUTH, LIAR) for p in pairs):
        return []
    return [(p[0], p[1] == TRUTH) for p in pairs]


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
