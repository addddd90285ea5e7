"""Three arithmetic skills in one task: two to learn, one to keep.

`add` is decimal addition (`57+23=`), which a base pretrained on it does well; `oct` is addition
in octal, tagged (`o57+23=` is `o102`'s sum, `102`); `sub` is subtraction (`57-23=`), which the
base never saw. Train shows the two target skills only (`SPLIT_FAMILIES`: its family is
`targets`); dev and test mix all three in equal shares, so a test score counts what training on
the targets did to `add`. Heldout mixes the three with the larger operand second, as arith's
heldout does: for `sub` that makes the answer negative, a form train never shows.

`pretrain` is mostly `add`, a little of the two targets (`pretrain_shares`), either operand first.
The base model's corpus (rlbench/models/recipes/multi-s.yaml) is half `pretrain` and half `main`:
add 57%, oct and sub 22% each. A base pretrained on it adds well and has a start on the targets,
which RL needs: on a base that never saw them (adder-s: octal 2%, subtraction 0%) the reference
agent's five minutes of SFT and GRPO taught neither and lost the addition (test -25.8 points,
seed 0).
"""

from __future__ import annotations

import random
from typing import Any

from rlbench.data.generators.arith import to_base
from rlbench.rewards.skills import OCTAL_TAG

REWARD = "skill_exact"
DEFAULTS = {"max_operand": 99, "max_octal_operand": 127, "pretrain_shares": {"add": 0.8, "oct": 0.1, "sub": 0.1}}
SPLIT_FAMILIES = {"train": "targets"}


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    p = {**DEFAULTS, **(params or {})}
    if family not in ("main", "targets", "heldout", "pretrain"):
        raise ValueError(f"unknown family '{family}' (main | targets | heldout | pretrain)")
    if family == "pretrain":
        shares = dict(p["pretrain_shares"])
        skill = rng.choices(sorted(shares), weights=[float(shares[k]) for k in sorted(shares)])[0]
    else:
        skill = rng.choice(("oct", "sub") if family == "targets" else ("add", "oct", "sub"))
    hi = int(p["max_octal_operand"] if skill == "oct" else p["max_operand"])
    a, b = rng.randint(0, hi), rng.randint(0, hi)
    if family == "heldout":
        while a == b:
            a, b = rng.randint(0, hi), rng.randint(0, hi)
        a, b = min(a, b), max(a, b)
    elif family != "pretrain":  # pretrain keeps either operand first: the base sees every problem
        a, b = max(a, b), min(a, b)
    if skill == "oct":
        prompt, answer = f"{OCTAL_TAG}{to_base(a, 8)}+{to_base(b, 8)}=", to_base(a + b, 8)
    elif skill == "sub":
        prompt, answer = f"{a}-{b}=", str(a - b)
    else:
        prompt, answer = f"{a}+{b}=", str(a + b)
    return {"prompt": prompt, "answer": answer, "family": family, "skill": skill}
