"""Text-transformation instructions with one verifiable answer (the format-if task).

A prompt is `OPS:word word word=`; the answer is the words transformed by every op, in order.
Ops of the `main` family: `U` upper case, `T` title case, `R` reverse the order, `C` join with
commas, a digit `N` keep the first N words. The `heldout` family adds constraint types that train,
dev and test never show: `D` join with dashes, `K` end with the keyword `ok`. Base models are
pretrained on both families, so the heldout split measures whether training on the main types
carries over to the unseen ones rather than whether an op was ever seen.
"""

from __future__ import annotations

import random
from typing import Any

REWARD = "exact_text"  # what calibrates a base model pretrained on this corpus
MAX_NEW_TOKENS = 24

WORDS = ("ant bat bee cat cow dog eel elk emu fox gnu hen owl pig ram rat yak sun sky sea map cup pen box "
         "hat jar key kit log mud net oak pad pod rug toy van web zip ice fig nut pea yam jam gum bud").split()
DEFAULTS = {"min_words": 2, "max_words": 4}
MAIN_OPS = ("U", "T", "R", "C", "N")
HELDOUT_OPS = ("D", "K")


def apply(ops: str, words: list[str]) -> str:
    """The unique text that satisfies `ops` on `words` (the verifier's answer)."""
    words = list(words)
    sep = " "
    keyword = ""
    for op in ops:
        if op == "U":
            words = [w.upper() for w in words]
        elif op == "T":
            words = [w.title() for w in words]
        elif op == "R":
            words = words[::-1]
        elif op == "C":
            sep = ","
        elif op == "D":
            sep = "-"
        elif op == "K":
            keyword = "ok"
        elif op.isdigit():
            words = words[: int(op)]
        else:
            raise ValueError(f"unknown op {op!r}")
    return sep.join(words + ([keyword] if keyword else []))


def _ops(rng: random.Random, family: str) -> str:
    pool = MAIN_OPS + (HELDOUT_OPS if family == "heldout" else ())
    k = rng.choice((1, 2))
    chosen = rng.sample(pool, k)
    if family == "heldout" and not any(o in HELDOUT_OPS for o in chosen):
        chosen[0] = rng.choice(HELDOUT_OPS)
    if "U" in chosen and "T" in chosen:  # one case op at most: the second would overwrite the first
        chosen.remove("T")
    if "C" in chosen and "D" in chosen:
        chosen.remove("C")
    return "".join(chosen)


def generate(family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]:
    if family not in ("main", "heldout"):
        raise ValueError(f"unknown family '{family}' (main | heldout)")
    p = {**DEFAULTS, **(params or {})}
    n = rng.randint(int(p["min_words"]), int(p["max_words"]))
    words = rng.sample(WORDS, n)
    ops = _ops(rng, family)
    ops = "".join(str(rng.randint(1, n - 1)) if o == "N" else o for o in ops)
    return {"prompt": f"{ops}:{' '.join(words)}=", "answer": apply(ops, words), "family": family}
