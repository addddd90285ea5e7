"""Score against compute: what the agent had to show at each moment, and the area under it.

Every valid submission is scored on the hidden test split (after the agent, so the scoring takes
none of its CPU), and stamped with the wall and CPU seconds at which it arrived. At any moment the
harness would pick, among the submissions so far, the one its selection rule picks at the end
(best dev, or last), so the curve is that pick's test gain over the base model, a step function
that starts at zero. Its area over the budget, divided by the budget, is the anytime gain: equal to
the final gain for an agent that had it from the first second, less for one that got there late.
The same area over the agent's CPU seconds gives the CPU-weighted form.
"""

from __future__ import annotations

from typing import Any, Sequence


def _pick(so_far: Sequence[dict[str, Any]], select: str) -> dict[str, Any]:
    if select == "last":
        return so_far[-1]
    return max(so_far, key=lambda s: (s["dev"], -s["index"]))


def _area(xs: list[float], gains: list[float], end: float) -> float | None:
    """(1/end) * integral of the step function that is gains[i] from xs[i] on (0 before xs[0])."""
    if end <= 0:
        return None
    total = 0.0
    for i, (x, g) in enumerate(zip(xs, gains)):
        nxt = xs[i + 1] if i + 1 < len(xs) else end
        total += g * max(0.0, min(nxt, end) - min(x, end))
    return total / end


def anytime_curve(points: Sequence[dict[str, Any]], base_test: float, budget_s: float, total_cpu_s: float,
                  select: str = "best") -> dict[str, Any]:
    """`points`: the valid submissions in arrival order, each with index, t, cpu_s, dev and test."""
    curve, seen = [], []
    for p in points:
        seen.append(p)
        pick = _pick(seen, select)
        curve.append({"index": p["index"], "t": p["t"], "cpu_s": p.get("cpu_s"), "test": p["test"],
                      "pick": pick["index"], "gain": round(pick["test"] - base_test, 4)})
    gains = [c["gain"] for c in curve]
    cpus = [c["cpu_s"] for c in curve]
    final = gains[-1] if gains else 0.0
    out: dict[str, Any] = {"curve": curve, "base_test": base_test, "final_gain": final,
                           "anytime_gain": _area([c["t"] for c in curve], gains, budget_s) if curve else 0.0,
                           "cpu_seconds": round(total_cpu_s, 1)}
    if curve and None not in cpus:
        out["anytime_gain_cpu"] = _area([float(c) for c in cpus], gains, max(total_cpu_s, cpus[-1]))
    out["gain_per_cpu_hour"] = (final / (total_cpu_s / 3600.0)) if total_cpu_s > 0 else None
    return out
