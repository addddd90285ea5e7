"""Verifiers of text-transformation instructions (the format-if task)."""

from __future__ import annotations


def exact_text(completion: str, answer: str) -> float:
    """1 when the completion, stripped of surrounding whitespace, is exactly the required text.
    The answer is the unique text satisfying every constraint of the prompt (case, count, order,
    separator, keyword), so this checks all of them at once."""
    return 1.0 if completion.strip() == str(answer).strip() else 0.0
