"""Two-operand addition problems with a verifiable integer answer.

`main`: `a+b=` with a, b uniform in [0, max_operand] and a >= b (the larger operand first).
`heldout`: the same problems with the larger operand second (a < b): a variant that the task's
train, dev and test splits never show, so a gain there is generalisation of the skill rather than
fitting the training prompts. The two families partition all problems and ask for the same
arithmetic, so training on one biases nothing about the answers of the other (a heldout carved out
by answer structure, such as double-carry sums, was measured to be unlearned by GRPO on the rest:
the exclusion itself teaches that such answers do not occur). A base model pretrained on the 50/50
mix of the families sees uniform addition.

`number_base` (2-10, default 10) writes operands and sum in that base: the same skill in another
notation, for domain adaptation (a base pretrained in decimal; in octal, `57+23=` is `102`). Sums
without a carry read the same in both, so a decimal model starts with part of the skill, and what
it must learn is where the carries fall.
"""

from __future__ import annotations

import random
from typing import Any

DEFAULTS = {"max_operand": 99, "number_base": 10}


def to_base(n: int, base: int) -> str:
    """`n` >= 0 written in `base` (2-10) with the digits 0-9."""
    digits = ""
    while True:
        n, d = divmod(n, base)
        digits = str(d) + digits
        if n == 0:
            return digits


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    hi, base = int(p["max_operand"]), int(p["number_base"])
    if family not in ("main", "heldout"):
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    if not 2 <= base <= 10:
        raise ValueError(f"number_base {base}: must be 2-10 (digits 0-9)")
    a, b = rng.randint(0, hi), rng.randint(0, hi)
    if family == "main":
        a, b = max(a, b), min(a, b)
    else:
        while a == b:
            a, b = rng.randint(0, hi), rng.randint(0, hi)
        a, b = min(a, b), max(a, b)
    return {"prompt": f"{to_base(a, base)}+{to_base(b, base)}=", "answer": to_base(a + b, base), "family": family}


def generate_pairs(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    """An addition problem with a preference pair of answers judged by the hidden gold reward
    (rlbench/rewards/graded.py:int_closeness): `chosen` is nearer the true sum than `rejected`,
    and is exactly right only some of the time, so the pairs never list the answers."""
    item = generate(family, rng, params)
    want = int(item["answer"])
    p = {"exact_share": 0.4, **(params or {})}

    def near(lo: int, hi: int) -> int:
        while True:
            off = rng.randint(lo, hi) * rng.choice((-1, 1))
            if want + off >= 0:
                return want + off

    if rng.random() < float(p["exact_share"]):
        chosen = want
        rejected = near(1, 30)
    else:
        a, b = near(1, 6), near(8, 40)
        chosen, rejected = (a, b) if abs(a - want) < abs(b - want) else (b, a)
    return {**item, "chosen": str(chosen), "rejected": str(rejected)}
