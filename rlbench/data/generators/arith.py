"""Two-operand addition problems with a verifiable integer answer.

`main`: `a+b=` with a, b uniform in [0, max_operand] and a >= b (the larger operand first).
`heldout`: the same problems with the larger operand second (a < b): a variant that the task's
train, dev and test splits never show, so a gain there is generalisation of the skill rather than
fitting the training prompts. The two families partition all problems and ask for the same
arithmetic, so training on one biases nothing about the answers of the other (a heldout carved out
by answer structure, such as double-carry sums, was measured to be unlearned by GRPO on the rest:
the exclusion itself teaches that such answers do not occur). A base model pretrained on the 50/50
mix of the families sees uniform addition.
"""

from __future__ import annotations

import random
from typing import Any

DEFAULTS = {"max_operand": 99}


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    hi = int(p["max_operand"])
    if family not in ("main", "heldout"):
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    a, b = rng.randint(0, hi), rng.randint(0, hi)
    if family == "main":
        a, b = max(a, b), min(a, b)
    else:
        while a == b:
            a, b = rng.randint(0, hi), rng.randint(0, hi)
        a, b = min(a, b), max(a, b)
    return {"prompt": f"{a}+{b}=", "answer": str(a + b), "family": family}
