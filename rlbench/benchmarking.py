"""Side-by-side measurements that survive a noisy machine, for the benchmark scripts.

One pass per side, one after the other, measured the machine's load as much as the code (an
ours/TRL ratio of 1.60x in one run was 0.83x in the next on the same machine), so every
side-by-side script runs rounds in which each side runs once, in alternating order (A B, B A,
...), takes each ratio within its round, and reports the median with its range.
"""

from __future__ import annotations

import statistics
from typing import Callable, Hashable, Sequence, TypeVar

S = TypeVar("S", bound=Hashable)
R = TypeVar("R")


def interleaved(sides: Sequence[S], rounds: int, run: Callable[[S], R],
                on_run: Callable[[int, S], None] | None = None) -> dict[S, list[R]]:
    """`run(side)` once per side per round, the order reversed every other round (slow drift in
    the machine's load then reaches both sides of a ratio alike): each side's results by round."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1 (got {rounds})")
    if len(set(sides)) != len(sides) or not sides:
        raise ValueError(f"sides must be distinct and at least one (got {list(sides)})")
    out: dict[S, list[R]] = {side: [] for side in sides}
    for r in range(rounds):
        for side in (sides if r % 2 == 0 else list(sides)[::-1]):
            if on_run:
                on_run(r, side)
            out[side].append(run(side))
    return out


def ratios(a: Sequence[float], b: Sequence[float]) -> list[float]:
    """b / a within each round (rounds where either side has no value, or a is 0, are left out)."""
    return [y / x for x, y in zip(a, b) if x and x == x and y == y]


def median_range(xs: Sequence[float], spec: str = ".2f") -> str:
    """`median [min-max]`, each formatted with `spec`."""
    if not xs:
        raise ValueError("no values")
    return f"{format(statistics.median(xs), spec)} [{format(min(xs), spec)}-{format(max(xs), spec)}]"
