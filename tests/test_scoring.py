"""Scoring on hand-computed cases: bootstrap intervals, seed aggregates, capabilities, suite scores."""

from __future__ import annotations

import math
import random

import pytest

from rlbench.scoring.bootstrap import paired_bootstrap
from rlbench.scoring.capabilities import capabilities
from rlbench.scoring.seeds import across_seeds
from rlbench.scoring.suite import score_suite


def test_bootstrap_of_identical_scores_is_zero_and_not_significant():
    base = [0.0, 0.25, 0.5, 1.0, 0.75] * 20
    g = paired_bootstrap(base, base)
    assert g.abs_gain == 0 and g.ci_low == 0 and g.ci_high == 0
    assert not g.significant and g.rel_gain_pct == 0


def test_bootstrap_of_a_constant_improvement_is_exact():
    base = [0.0, 0.25, 0.5] * 10
    new = [b + 0.25 for b in base]
    g = paired_bootstrap(base, new)
    assert g.abs_gain == pytest.approx(0.25)
    assert g.ci_low == pytest.approx(0.25) and g.ci_high == pytest.approx(0.25)  # every resample sees +0.25
    assert g.significant
    assert g.rel_gain_pct == pytest.approx(100 * 0.25 / 0.25)  # base mean 0.25 -> +100%


def test_bootstrap_matches_the_normal_interval_on_a_large_sample_and_is_seeded():
    rng = random.Random(0)
    base = [rng.random() for _ in range(2000)]
    new = [min(1.0, max(0.0, b + rng.gauss(0.02, 0.1))) for b in base]
    g = paired_bootstrap(base, new)
    diffs = [b - a for a, b in zip(base, new)]
    mean = sum(diffs) / len(diffs)
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / (len(diffs) - 1))
    half = 1.96 * sd / math.sqrt(len(diffs))
    assert g.abs_gain == pytest.approx(mean)
    assert (g.ci_high - g.ci_low) / 2 == pytest.approx(half, rel=0.1)
    assert paired_bootstrap(base, new) == g  # same scores, same interval
    assert paired_bootstrap(base, new, seed=1) != g  # the seed is what fixes it


def test_bootstrap_refuses_unpaired_or_empty_input_and_handles_a_zero_base():
    with pytest.raises(ValueError, match="same items"):
        paired_bootstrap([0.1, 0.2], [0.1])
    with pytest.raises(ValueError, match="at least one"):
        paired_bootstrap([], [])
    g = paired_bootstrap([0.0, 0.0], [1.0, 0.0])
    assert g.rel_gain_pct is None and g.abs_gain == 0.5


def test_across_seeds_uses_the_t_interval():
    agg = across_seeds([0.1, 0.2, 0.3])
    assert agg["mean"] == pytest.approx(0.2) and agg["sd"] == pytest.approx(0.1)
    half = 4.302652729911275 * 0.1 / math.sqrt(3)  # t(0.975, df=2)
    assert agg["ci_low"] == pytest.approx(0.2 - half) and agg["ci_high"] == pytest.approx(0.2 + half)
    one = across_seeds([0.4])
    assert one["n"] == 1 and one["sd"] is None and one["ci_low"] is None
    with pytest.raises(ValueError):
        across_seeds([])


def _exec(ok: bool, rss: float = 100.0, seconds: float = 2.0) -> dict:
    return {"tool": "exec", "seconds": seconds, "cpu_s": 1.0,
            "result": {"ok": ok, "returncode": 0 if ok else 1, "max_rss_mb": rss}}


def test_capabilities_from_a_hand_built_trajectory():
    trajectory = [
        {"tool": "read", "result": {"ok": True}},
        _exec(False, 80), _exec(True, 300), _exec(False, 120),  # one failure recovered, one not
        {"tool": "sweep", "seconds": 40.0, "result": {"ok": True}},
        {"tool": "exec", "result": {"ok": False, "error": "the budget is spent"}},  # refused: not an execution
    ]
    submissions = [{"ok": True, "dev": 0.2, "t": 10.0, "checkpoint_hash": "base"},
                   {"ok": False, "t": 20.0}, {"ok": True, "dev": 0.5, "t": 30.0, "checkpoint_hash": "x"}]
    c = capabilities(trajectory, submissions, "ok", base_hash="base")
    assert c["executions"] == 3 and c["failed_executions"] == 2
    assert c["recovery"] == 0.5 and c["recovered"]
    assert c["correctness"] == pytest.approx(1 / 3)
    assert c["peak_memory_mb"] == 300 and c["execution_seconds"] == 6.0 and c["sweep_seconds"] == 40.0
    assert c["autonomy"] and c["valid_submission_rate"] == pytest.approx(2 / 3)
    assert c["base_model_submissions"] == 1
    assert c["time_to_first_valid_s"] == 10.0 and c["time_to_best_s"] == 30.0 and c["best_dev"] == 0.5
    bare = capabilities([], [], "budget_exceeded")
    assert not bare["autonomy"] and bare["recovery"] is None and bare["correctness"] is None


def _cell(agent: str, gain: float | None, status: str = "ok", seed: int = 0, best_dev: float = 0.3, vs=None) -> dict:
    r = {"agent": agent, "task": "t", "seed": seed, "status": status, "cell": f"{agent}-t-s{seed}",
         "capabilities": {"best_dev": best_dev}}
    if gain is not None:
        r["gains"] = {"test": {"abs": gain, "ci_low": gain - 0.01, "ci_high": gain + 0.01, "significant": gain > 0.01},
                      "heldout": {"abs": gain / 2, "ci_low": 0.0, "ci_high": gain}}
    if vs is not None:
        r["vs_baseline_config"] = {"gains": {"test": {"abs": vs, "ci_low": vs - 0.01, "ci_high": vs + 0.01,
                                                      "significant": True}}}
    return r


def test_suite_scores_normalize_against_null_and_reference_of_the_same_task_and_seed():
    cells = [_cell("null", None, status="no_submission", best_dev=0.0), _cell("reference", 0.30, best_dev=0.4, vs=0.10),
             _cell("mine", 0.15, best_dev=0.2, vs=0.05), _cell("mine", 0.20, seed=1)]
    scores = score_suite(cells)
    rows = {(r["agent"], r["seed"]): r for r in scores["cells"]}
    assert rows[("null", 0)]["normalized"] == 0.0  # no submission scores as the base model
    assert rows[("reference", 0)]["normalized"] == 1.0
    assert rows[("mine", 0)]["normalized"] == pytest.approx(0.5)
    assert rows[("mine", 1)]["normalized"] is None  # no null or reference cell at seed 1
    assert rows[("mine", 0)]["optimization"] == pytest.approx(0.5)  # best dev 0.2 against the reference's 0.4
    assert rows[("mine", 0)]["closeness_to_reference"] == pytest.approx(0.5)  # 0.05 of the reference's 0.10
    agg = {a["agent"]: a for a in scores["aggregates"]}
    assert agg["mine"]["abs_gain"]["mean"] == pytest.approx(0.175) and agg["mine"]["abs_gain"]["n"] == 2


def test_normalized_score_is_undefined_when_the_reference_does_not_beat_null():
    rows = score_suite([_cell("null", 0.0), _cell("reference", 0.0), _cell("mine", 0.1)])["cells"]
    assert all(r["normalized"] is None for r in rows)
