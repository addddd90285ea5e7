"""Paired bootstrap over evaluation items: the interval of a gain, and whether it is real.

Base and submission are scored on the same items under the same seeded protocol, so the unit that
is resampled is the item: one resample draws item indices with replacement and recomputes both
means on the same draw. The bootstrap's own RNG is seeded: the same scores give the same interval.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Sequence

import numpy as np

N_RESAMPLES = 2000
SEED = 20261202


@dataclass
class PairedGain:
    base: float
    score: float
    abs_gain: float
    ci_low: float
    ci_high: float
    rel_gain_pct: float | None  # percent of the base score; None when the base is 0
    rel_ci_low: float | None
    rel_ci_high: float | None
    significant: bool  # the 95% interval of the absolute gain excludes zero
    n: int
    resamples: int

    def as_dict(self) -> dict:
        return asdict(self)


def paired_bootstrap(base: Sequence[float], new: Sequence[float], resamples: int = N_RESAMPLES,
                     seed: int = SEED, level: float = 0.95) -> PairedGain:
    """Percentile intervals of mean(new) - mean(base) and of its ratio to mean(base)."""
    b = np.asarray(base, dtype=np.float64)
    s = np.asarray(new, dtype=np.float64)
    if b.shape != s.shape or b.ndim != 1:
        raise ValueError(f"a paired gain needs the same items in the same order (got {b.shape} and {s.shape})")
    if b.size == 0:
        raise ValueError("a paired gain needs at least one item")
    if resamples < 1:
        raise ValueError(f"resamples must be >= 1, got {resamples}")
    n = b.size
    base_mean, new_mean = float(b.mean()), float(s.mean())
    idx = np.random.default_rng(seed).integers(0, n, size=(resamples, n))
    boot_base = b[idx].mean(axis=1)
    boot_new = s[idx].mean(axis=1)
    tail = 100 * (1 - level) / 2
    lo, hi = (float(v) for v in np.percentile(boot_new - boot_base, [tail, 100 - tail]))
    rel = rel_lo = rel_hi = None
    if base_mean > 0:
        rel = 100 * (new_mean - base_mean) / base_mean
        with np.errstate(divide="ignore", invalid="ignore"):
            ratios = 100 * (boot_new - boot_base) / boot_base
        ratios = ratios[np.isfinite(ratios)]  # a resample can draw only zero-base items
        if ratios.size:
            rel_lo, rel_hi = (float(v) for v in np.percentile(ratios, [tail, 100 - tail]))
    return PairedGain(base=base_mean, score=new_mean, abs_gain=new_mean - base_mean, ci_low=lo, ci_high=hi,
                      rel_gain_pct=rel, rel_ci_low=rel_lo, rel_ci_high=rel_hi,
                      significant=bool(lo > 0 or hi < 0), n=n, resamples=resamples)
