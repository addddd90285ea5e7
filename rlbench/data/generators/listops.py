"""Small programming problems: a spec in words, a program of list transformations, hidden tests.

A spec names a chain of steps on a list of small integers (`add 3, sort, first 2, sum`); the
program does them in order, one assignment a step, on the list `v`:

    v=[e+3 for e in v]
    v=sorted(v)
    v=v[:2]
    v=sum(v)

The answer is not the program (many programs pass) but the tests: inputs and the outputs the spec
gives on them, as JSON (`rlbench/rewards/listops.py` runs the completion on the inputs in a sandbox
of its own and compares its printed outputs outside it: the expected outputs never enter the
sandbox, so a completion that reads its own program finds no test to copy).

`main` chains one or two list steps and, in two of three cases, a final `sum` or `len`; `heldout`
chains three: compositions the train split never shows. Each item carries `trace`, the reference
program, which a pretraining corpus uses after the prompt; workspaces never show it.
"""

from __future__ import annotations

import json
import random
from typing import Any, Callable

REWARD = "list_program"
MAX_NEW_TOKENS = 96
SPEC_END = ":"

# name -> (parameter range or None, program line, reference function)
_STEPS: dict[str, tuple[tuple[int, int] | None, str, Callable[[list[int], int], list[int]]]] = {
    "sort": (None, "v=sorted(v)", lambda v, k: sorted(v)),
    "reverse": (None, "v=v[::-1]", lambda v, k: v[::-1]),
    "add": ((1, 9), "v=[e+{k} for e in v]", lambda v, k: [e + k for e in v]),
    "times": ((2, 5), "v=[e*{k} for e in v]", lambda v, k: [e * k for e in v]),
    "keep>": ((0, 9), "v=[e for e in v if e>{k}]", lambda v, k: [e for e in v if e > k]),
    "first": ((1, 5), "v=v[:{k}]", lambda v, k: v[:k]),
    "drop": ((1, 3), "v=v[{k}:]", lambda v, k: v[k:]),
}
_FINAL: dict[str, tuple[str, Callable[[list[int]], int]]] = {"sum": ("v=sum(v)", sum), "len": ("v=len(v)", len)}
N_TESTS = 5


def _step(rng: random.Random) -> tuple[str, str, Callable[[list[int]], list[int]]]:
    name = rng.choice(sorted(_STEPS))
    bounds, line, fn = _STEPS[name]
    k = rng.randint(*bounds) if bounds else 0
    spec = f"{name} {k}" if bounds and name != "keep>" else (f"keep>{k}" if bounds else name)
    return spec, line.format(k=k), lambda v, fn=fn, k=k: fn(v, k)


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    if family not in ("main", "heldout"):
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    n = rng.choice((1, 2)) if family == "main" else 3
    steps = [_step(rng) for _ in range(n)]
    final = rng.choice((None, "sum", "len"))
    specs, lines = [s for s, _, _ in steps], [line for _, line, _ in steps]
    if final:
        specs.append(final)
        lines.append(_FINAL[final][0])
    inputs = [[rng.randint(0, 9) for _ in range(rng.randint(2, 7))] for _ in range(N_TESTS)]

    def run(v: list[int]) -> Any:
        for _, _, fn in steps:
            v = fn(v)
        return _FINAL[final][1](v) if final else v

    tests = {"inputs": inputs, "outputs": [run(list(x)) for x in inputs]}
    return {"prompt": ", ".join(specs) + SPEC_END, "answer": json.dumps(tests, separators=(",", ":")),
            "trace": "\n".join(lines), "family": family}
