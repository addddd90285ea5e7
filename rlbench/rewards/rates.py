"""The one rate every reward breakdown reports: a count over its total, rounded for a report, and
None where there is nothing to count (a split with no item of that kind), never a division error."""

from __future__ import annotations


def rate(k: float, n: int) -> float | None:
    return round(k / n, 4) if n else None


__all__ = ["rate"]
