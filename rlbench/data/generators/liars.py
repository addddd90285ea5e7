"""Truth-tellers (the web of lies): who tells the truth, when each speaker vouches for another?

Everyone always tells the truth or always lies. A puzzle's people are `a`, `b`, `c`, ... in a
chain: `a`'s kind is stated, and each next person speaks about the one before, `+` for "tells the
truth" and `-` for "lies"; the statements come shuffled:

    c:b+,a:T,d:c-,b:a-;d?

reads "c says b tells the truth; a tells the truth; d says c lies; b says a lies; does d tell the
truth?". A truth-teller's claim is true and a liar's false, so each kind follows from the one
before and one statement: the answer (`y` or `n`, half each) is the parity of the whole chain,
which a small model answering at once gets no better than a coin. Written out in order, each step
is one look-up and one flip (`aTbFcFdT;y`: each person and its kind, then the answer): the task
where a reasoning trace before the answer pays.

`main` has 5 or 6 people, `heldout` 7 or 8 (longer chains than train shows). Each item carries
`trace`, the text a pretraining corpus puts after the prompt: the worked chain and the answer in
`trace_share` of cases, else the answer alone. A base pretrained on it (liars-s) can reason step
by step and seldom does; workspaces never show the trace.

(A first design named people at random and kept the statements in chain order, with a trace of
kinds only (`TFFT;y`); its 0.67M base learned neither the answer nor the trace in 3,000 steps:
finding the statement for the k-th kind took counting positions. Here the trace names each person,
and the statement is found by its name.)
"""

from __future__ import annotations

import random
import string
from typing import Any

from rlbench.data.generators import share_param
from rlbench.rewards.deduce import ANSWER_MARK, LIAR, NO, TRUTH, YES

REWARD = "yes_no"
MAX_NEW_TOKENS = 20
DEFAULTS = {"trace_share": 0.0}
PEOPLE = string.ascii_lowercase[:8]  # a-h: never `y` or `n`, which read as answers
SIZES = {"main": (5, 6), "heldout": (7, 8)}


def solve(prompt: str) -> list[tuple[str, bool]]:
    """Each person and its kind (True: tells the truth), in chain order, deduced from a prompt."""
    said = dict(s.split(":") for s in prompt.split(ANSWER_MARK)[0].split(","))
    first = next(name for name, what in said.items() if what in (TRUTH, LIAR))
    chain = [(first, said[first] == TRUTH)]
    about = {what[:-1]: (name, what[-1] == "+") for name, what in said.items() if what not in (TRUTH, LIAR)}
    while chain[-1][0] in about:
        name, claim_true = about[chain[-1][0]]
        chain.append((name, chain[-1][1] == claim_true))  # right about the one before: a truth-teller
    return chain


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    if family not in SIZES:
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    p = {**DEFAULTS, **(params or {})}
    share = share_param(p, "trace_share")
    names = PEOPLE[:rng.choice(SIZES[family])]
    statements = [f"{names[0]}:{rng.choice((TRUTH, LIAR))}"]
    statements += [f"{names[i]}:{names[i - 1]}{rng.choice('+-')}" for i in range(1, len(names))]
    rng.shuffle(statements)
    prompt = ",".join(statements) + f"{ANSWER_MARK}{names[-1]}?"
    chain = solve(prompt)
    answer = YES if chain[-1][1] else NO
    worked = "".join(name + (TRUTH if kind else LIAR) for name, kind in chain)
    trace = worked + ANSWER_MARK + answer if rng.random() < share else answer
    return {"prompt": prompt, "answer": answer, "trace": trace, "family": family}
