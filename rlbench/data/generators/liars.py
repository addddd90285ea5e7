"""Truth-tellers (the web of lies): who tells the truth, when each speaker vouches for the last?

A puzzle names a first person's kind and then a chain of speakers, each saying that the one before
tells the truth (`+`) or lies (`-`): `a:T,b:a-,c:b+,d:c-;d?` reads "a tells the truth; b says a
lies; c says b tells the truth; c says ... does d tell the truth?". A truth-teller's claim is true
and a liar's false, so each speaker's kind follows from the one before: the answer (`y` or `n`,
half each) is the parity of the whole chain, which a small model answering at once gets little
better than a coin, and which is one easy step a speaker when it writes each kind in turn first
(`TFFT;y`, T for truth-teller and F for liar): the task where a reasoning trace before the answer
pays.

`main` has 4 or 5 people, `heldout` 6 or 7 (longer chains than train shows). Each item carries
`trace`, the text a pretraining corpus puts after the prompt: the kinds and the answer in
`trace_share` of cases, else the answer alone. A base pretrained on it (liars-s) can reason step
by step and seldom does; workspaces never show the trace.
"""

from __future__ import annotations

import random
import string
from typing import Any

from rlbench.rewards.deduce import ANSWER_MARK, LIAR, NO, TRUTH, YES

REWARD = "yes_no"
MAX_NEW_TOKENS = 16
DEFAULTS = {"trace_share": 0.0}
PEOPLE = [c for c in string.ascii_lowercase if c not in (YES, NO)]  # no name reads as an answer
SIZES = {"main": (4, 5), "heldout": (6, 7)}


def solve(prompt: str) -> list[bool]:
    """Each person's kind in order (True: tells the truth), deduced from a puzzle's prompt."""
    statements = prompt.split(ANSWER_MARK)[0].split(",")
    kinds = [statements[0].split(":")[1] == TRUTH]
    for s in statements[1:]:
        claim_true = s.endswith("+")
        kinds.append(kinds[-1] == claim_true)  # right about the one before: a truth-teller
    return kinds


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    if family not in SIZES:
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    p = {**DEFAULTS, **(params or {})}
    share = float(p["trace_share"])
    if not 0.0 <= share <= 1.0:
        raise ValueError(f"trace_share {share}: must be within [0, 1]")
    names = rng.sample(PEOPLE, rng.choice(SIZES[family]))
    parts = [f"{names[0]}:{rng.choice((TRUTH, LIAR))}"]
    parts += [f"{names[i]}:{names[i - 1]}{rng.choice('+-')}" for i in range(1, len(names))]
    prompt = ",".join(parts) + f"{ANSWER_MARK}{names[-1]}?"
    kinds = solve(prompt)
    answer = YES if kinds[-1] else NO
    trace = ("".join(TRUTH if k else LIAR for k in kinds) + ANSWER_MARK + answer) if rng.random() < share else answer
    return {"prompt": prompt, "answer": answer, "trace": trace, "family": family}
