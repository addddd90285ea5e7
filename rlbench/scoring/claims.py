"""How well an agent knows its own result: its claimed test gain against the harness's.

An evaluate task asks the agent for the absolute test gain of a submission with a 95% interval.
The claim is judged on the chosen submission: its error, whether the claimed interval covers the
measured gain, and its width (a claim that covers everything by being wide says little).
"""

from __future__ import annotations

from typing import Any, Mapping

from rlbench.results import Gain


def score_claim(claim: dict[str, Any] | None, measured: Gain | Mapping[str, Any]) -> dict[str, Any]:
    """`measured`: a result's test gain."""
    g = Gain.coerce(measured)
    if not claim:
        return {"made": False, "measured": g.abs}
    lo, hi = claim["ci"]
    err = claim["test_gain"] - g.abs
    return {"made": True, "claimed": claim["test_gain"], "claimed_ci": [lo, hi], "measured": g.abs,
            "measured_ci": g.ci, "error": err, "abs_error": abs(err), "covered": bool(lo <= g.abs <= hi),
            "width": hi - lo}
