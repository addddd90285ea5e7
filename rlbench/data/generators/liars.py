"""Truth-tellers (the web of lies): who tells the truth, when each speaker vouches for another?

Everyone always tells the truth or always lies. A puzzle's people are `a`, `b`, `c`, ... in
alphabetical order: `a`'s kind is stated, and each next person speaks about the one before, `+` for
"tells the truth" and `-` for "lies"; the statements come shuffled:

    c+,aT,d-,b-;d?

reads "c says b tells the truth; a tells the truth; d says c lies; b says a lies; does d tell the
truth?". A truth-teller's claim is true and a liar's false, so each kind follows from the one
before and one statement: the answer (`y` or `n`, half each) is the parity of the whole chain,
which a small model answering at once gets no better than a coin. Written out in order, each step
is one look-up and one flip (`aTb-Fc+Fd-T;y`: each person, what it said and its kind, then the
answer): the task where a reasoning trace before the answer pays.

`main` has 5 or 6 people, `heldout` 7 or 8 (longer chains than train shows); `short` (2 to 4) is
for pretraining corpora only. Each item carries `trace`, the text a pretraining corpus puts after
the prompt: the worked chain and the answer in `trace_share` of cases, else the answer alone. A base
pretrained on it (liars-s) can reason step by step and seldom does; workspaces never show the trace.

(Two earlier designs gave a 0.67M base no trace it could learn in 3,000 steps: with people named at
random and a trace of kinds only (`TFFT;y`), finding the k-th statement took counting positions;
with statements `c:b+` naming both people, a name occurs twice in a prompt and the look-up needed
a two-token match. Here each name occurs once before the question, and what it said follows it.)
"""

from __future__ import annotations

import random
import string
from typing import Any

from rlbench.data.generators import share_param
from rlbench.rewards.deduce import ANSWER_MARK, LIAR, NO, TRUTH, YES

REWARD = "yes_no"
MAX_NEW_TOKENS = 32
DEFAULTS = {"trace_share": 0.0}
PEOPLE = string.ascii_lowercase[:8]  # a-h: never `y` or `n`, which read as answers
SIZES = {"main": (5, 6), "heldout": (7, 8), "short": (2, 3, 4)}
CLAIMS = "+-"  # what a speaker says of the one before: tells the truth, lies


def _said(prompt: str) -> dict[str, str]:
    """What each person of a prompt says: `T`/`F` for `a`, `+`/`-` for the rest."""
    return {s[0]: s[1:] for s in prompt.split(ANSWER_MARK)[0].split(",")}


def solve(prompt: str) -> list[tuple[str, bool]]:
    """Each person and its kind (True: tells the truth), in chain order, deduced from a prompt."""
    said = _said(prompt)
    first = PEOPLE[0]
    chain = [(first, said[first] == TRUTH)]
    for name in PEOPLE[1:len(said)]:
        chain.append((name, chain[-1][1] == (said[name] == CLAIMS[0])))  # right about the one before: a truth-teller
    return chain


def worked(prompt: str) -> str:
    """The trace that works a prompt out: `aT`, then each next person, what it said and its kind."""
    said = _said(prompt)
    return "".join(name + ("" if i == 0 else said[name]) + (TRUTH if kind else LIAR)
                   for i, (name, kind) in enumerate(solve(prompt)))


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    if family not in SIZES:
        raise ValueError(f"unknown family '{family}' (main | heldout | short)")
    p = {**DEFAULTS, **(params or {})}
    # `short` is pretraining's curriculum: always worked out, so the look-up and the flip each
    # trace step makes are learned on chains of 2-4 before the task's, traced in `trace_share`
    share = share_param(p, "trace_share")  # checked for every family
    share = 1.0 if family == "short" else share
    names = PEOPLE[:rng.choice(SIZES[family])]
    statements = [names[0] + rng.choice((TRUTH, LIAR))] + [name + rng.choice(CLAIMS) for name in names[1:]]
    rng.shuffle(statements)
    prompt = ",".join(statements) + f"{ANSWER_MARK}{names[-1]}?"
    answer = YES if solve(prompt)[-1][1] else NO
    trace = worked(prompt) + ANSWER_MARK + answer if rng.random() < share else answer
    return {"prompt": prompt, "answer": answer, "trace": trace, "family": family}
