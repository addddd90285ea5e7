"""Multi-task scoring: an exact integer answer, and the score of each skill beside the mean.

A multi-task item names its skill by its prompt's form (`skill_of`), so the same per-prompt mean
the harness scores every task by is also cut per skill: a gain on the target skills that came with
a loss on the skill the base already had shows up as that loss, not only as a smaller mean.
"""

from __future__ import annotations

from typing import Any, Sequence

from rlbench.rewards.exact import exact_int
from rlbench.rewards.rates import rate

OCTAL_TAG = "o"  # `o57+23=`: the operands and the sum in octal
SKILLS = ("add", "oct", "sub")  # decimal addition (what the base can do), octal addition, subtraction


def skill_of(prompt: str) -> str:
    text = str(prompt)
    if text.startswith(OCTAL_TAG):
        return "oct"
    return "sub" if "-" in text else "add"


def skill_exact(completion: str, answer: str) -> float:
    return exact_int(completion, answer)


def skill_breakdown(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str]) -> dict[str, Any]:
    """Per skill: its completions' count and their mean exact score."""
    out: dict[str, Any] = {}
    for skill in SKILLS:
        hits = [exact_int(c, a) for p, c, a in zip(prompts, completions, answers) if skill_of(p) == skill]
        out[skill] = {"n": len(hits), "score": rate(sum(hits), len(hits))}
    return out


skill_exact.breakdown = skill_breakdown  # type: ignore[attr-defined]

__all__ = ["OCTAL_TAG", "SKILLS", "skill_breakdown", "skill_exact", "skill_of"]
