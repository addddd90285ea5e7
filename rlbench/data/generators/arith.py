"""Arithmetic problems with a verifiable integer answer.

`main`: `a+b=` with a, b uniform in [0, max_operand]. `heldout`: three operands `a+b+c=` with
operands in [0, heldout_max_operand], a format the task's training data never shows (the base
model's pretraining corpus does, at a small share, so the skill is there to transfer).
"""

from __future__ import annotations

import random
from typing import Any

DEFAULTS = {"max_operand": 99, "heldout_operands": 3, "heldout_max_operand": 49}


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    if family == "main":
        operands = [rng.randint(0, int(p["max_operand"])) for _ in range(2)]
    elif family == "heldout":
        operands = [rng.randint(0, int(p["heldout_max_operand"])) for _ in range(int(p["heldout_operands"]))]
    else:
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    prompt = "+".join(str(x) for x in operands) + "="
    return {"prompt": prompt, "answer": str(sum(operands)), "family": family}
