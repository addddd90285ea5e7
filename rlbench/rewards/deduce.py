"""Yes/no answers after an optional reasoning trace (the truth-tellers task).

A completion may reason before it answers: `TRACE;ANSWER`, where what follows the last `;` is the
answer (`y` or `n`). The verifier reads the answer only: whether the trace is right is the agent's
business (a reward on the trace's correctness or its format is one way to make the model reason;
`trace_kinds` parses it for that).
"""

from __future__ import annotations

ANSWER_MARK = ";"
YES, NO = "y", "n"
TRUTH, LIAR = "T", "F"  # a trace writes each person's kind in turn: `TFFT;y`


def final_answer(completion: str) -> str:
    """`y`, `n`, or '' for none: the first character after the last `;` (the whole completion
    where there is none), after whitespace."""
    text = str(completion).rsplit(ANSWER_MARK, 1)[-1].strip()
    return text[:1] if text[:1] in (YES, NO) else ""


def yes_no(completion: str, answer: str) -> float:
    return 1.0 if final_answer(completion) == str(answer).strip() else 0.0


def trace_kinds(completion: str) -> list[bool]:
    """The kinds a trace `TFFT;...` writes, True for a truth-teller ([] where the completion has
    no well-formed trace)."""
    text = str(completion)
    if ANSWER_MARK not in text:
        return []
    trace = text.rsplit(ANSWER_MARK, 1)[0].strip()
    return [c == TRUTH for c in trace] if trace and set(trace) <= {TRUTH, LIAR} else []


__all__ = ["ANSWER_MARK", "LIAR", "NO", "TRUTH", "YES", "final_answer", "trace_kinds", "yes_no"]
