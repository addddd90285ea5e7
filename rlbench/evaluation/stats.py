"""Intervals for pass@1 estimates."""

from __future__ import annotations

import math
from typing import Sequence

Z95 = 1.959963984540054


def mean_ci(values: Sequence[float], z: float = Z95, clamp: bool = True) -> tuple[float, float, float]:
    """Mean of per-prompt scores and a normal 95% interval over prompts (prompts are the unit
    that is sampled; completions of one prompt are not independent draws). `clamp` keeps the
    interval inside [0, 1]; paired differences, which live in [-1, 1], pass clamp=False."""
    n = len(values)
    if n == 0:
        return 0.0, 0.0, 0.0
    mean = sum(values) / n
    if n == 1:
        return mean, mean, mean
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = z * math.sqrt(var / n)
    if not clamp:
        return mean, mean - half, mean + half
    return mean, max(0.0, mean - half), min(1.0, mean + half)


def wilson_ci(successes: float, n: int, z: float = Z95) -> tuple[float, float, float]:
    """Proportion and its Wilson interval: sensible near 0 and 1, where the normal one is not."""
    if n == 0:
        return 0.0, 0.0, 0.0
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return p, max(0.0, centre - half), min(1.0, centre + half)
