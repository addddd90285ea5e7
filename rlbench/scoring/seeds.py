"""Across seeds: mean, standard deviation and a Student-t 95% interval (few seeds, so t, not z)."""

from __future__ import annotations

import math
from typing import Sequence

from scipy import stats


def across_seeds(values: Sequence[float], level: float = 0.95) -> dict[str, float | int | None]:
    """`sd` and the interval are None for a single value: one run says nothing about spread."""
    xs = [float(v) for v in values]
    n = len(xs)
    if n == 0:
        raise ValueError("across_seeds needs at least one value")
    mean = sum(xs) / n
    if n == 1:
        return {"n": 1, "mean": mean, "sd": None, "ci_low": None, "ci_high": None}
    sd = math.sqrt(sum((x - mean) ** 2 for x in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + level / 2, n - 1)) * sd / math.sqrt(n)
    return {"n": n, "mean": mean, "sd": sd, "ci_low": mean - half, "ci_high": mean + half}
