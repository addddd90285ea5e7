"""Graded (non-binary) verifiers.

`int_closeness` is the hidden gold reward of the preference task: it ranks wrong answers by how
wrong they are, so preference pairs between two wrong answers still carry signal, and a policy
improves it by moving mass toward nearer (not only exactly right) answers.
"""

from __future__ import annotations

from rlbench.rewards.exact import parsed_pair

SCALE = 20  # an answer this far off or farther gets nothing beyond "it is a number"


def int_closeness(completion: str, answer: str) -> float:
    """1 for the exact integer; 0.5 * (1 - |error| / 20) for a near miss; 0 for none or far off."""
    pair = parsed_pair(completion, answer)
    if pair is None:
        return 0.0
    got, want = pair
    if got == want:
        return 1.0
    return 0.5 * max(0.0, 1.0 - abs(got - want) / SCALE)
