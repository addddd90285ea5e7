"""Multiplication problems that a small model cannot do in its head but can with a calculator
(the tool-calc task).

`main`: `a*b=` with a in [10, 999] and b in [2, 99]. `heldout`: `a*b+c=` (c in [1, 99]), a form
the task's train, dev and test never show; a model that learned to hand the whole expression to
the calculator carries over, one that memorised products does not. Each item also carries
`trace`, the text a pretraining corpus uses after the prompt: mostly a direct answer (right only
as far as the model learns products), in `tool_share` of cases the calculator call
`[EXPR]VALUE` (rlbench/envs/calculator.py). A base model pretrained on this corpus knows the call
but seldom makes it: RL on the answer's reward is what raises its use. Workspaces never show the
trace.
"""

from __future__ import annotations

import random
from typing import Any

REWARD = "calc_exact"
MAX_NEW_TOKENS = 20
TOOL = "calculator"
DEFAULTS = {"tool_share": 0.15}


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    if family not in ("main", "heldout"):
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    p = {**DEFAULTS, **(params or {})}
    a, b = rng.randint(10, 999), rng.randint(2, 99)
    expr, value = f"{a}*{b}", a * b
    if family == "heldout":
        c = rng.randint(1, 99)
        expr, value = f"{expr}+{c}", value + c
    trace = f"[{expr}]{value}" if rng.random() < float(p["tool_share"]) else str(value)
    return {"prompt": f"{expr}=", "answer": str(value), "trace": trace, "family": family}
