"""Three arithmetic skills in one task: two to learn, one to keep.

`add` is decimal addition (`57+23=`), which a base pretrained on it does well; `oct` is addition
in octal, tagged (`o57+23=` is `o102`'s sum, `102`); `sub` is subtraction (`57-23=`), which the
base never saw. Train shows the two target skills only (`SPLIT_FAMILIES`: its family is
`targets`); dev and test mix all three in equal shares, so a test score counts what training on
the targets did to `add`. Heldout mixes the three with the larger operand second, as arith's
heldout does: for `sub` that makes the answer negative, a form train never shows.
"""

from __future__ import annotations

import random
from typing import Any

from rlbench.data.generators.arith import to_base
from rlbench.rewards.skills import OCTAL_TAG

REWARD = "skill_exact"
DEFAULTS = {"max_operand": 99, "max_octal_operand": 127}
SPLIT_FAMILIES = {"train": "targets"}


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    if family not in ("main", "targets", "heldout"):
        raise ValueError(f"unknown family '{family}' (main | targets | heldout)")
    skill = rng.choice(("oct", "sub") if family == "targets" else ("add", "oct", "sub"))
    hi = int(p["max_octal_operand"] if skill == "oct" else p["max_operand"])
    a, b = rng.randint(0, hi), rng.randint(0, hi)
    if family == "heldout":
        while a == b:
            a, b = rng.randint(0, hi), rng.randint(0, hi)
        a, b = min(a, b), max(a, b)
    else:
        a, b = max(a, b), min(a, b)
    if skill == "oct":
        prompt, answer = f"{OCTAL_TAG}{to_base(a, 8)}+{to_base(b, 8)}=", to_base(a + b, 8)
    elif skill == "sub":
        prompt, answer = f"{a}-{b}=", str(a - b)
    else:
        prompt, answer = f"{a}+{b}=", str(a + b)
    return {"prompt": prompt, "answer": answer, "family": family, "skill": skill}
