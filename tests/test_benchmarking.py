"""The benchmark scripts' shared rule: sides interleaved by round, ratios within a round, medians
with their range."""

import math

import pytest

from rlbench.benchmarking import interleaved, median_range, ratios


def test_each_round_runs_every_side_once_in_alternating_order():
    order = []
    got = interleaved(["a", "b", "c"], 4, lambda s: (order.append(s), f"{s}{len(order)}")[1],
                      on_run=lambda r, s: order.append(f"r{r}"))
    runs = [x for x in order if not x.startswith("r")]
    assert runs == ["a", "b", "c", "c", "b", "a", "a", "b", "c", "c", "b", "a"]
    assert [x for x in order if x.startswith("r")] == ["r0"] * 3 + ["r1"] * 3 + ["r2"] * 3 + ["r3"] * 3
    assert [len(v) for v in got.values()] == [4, 4, 4] and got["a"][0] == "a2"
    with pytest.raises(ValueError, match="rounds"):
        interleaved(["a"], 0, lambda s: s)
    with pytest.raises(ValueError, match="distinct"):
        interleaved(["a", "a"], 1, lambda s: s)


def test_ratios_are_taken_within_a_round_and_skip_missing_rounds():
    assert ratios([1.0, 2.0, 4.0], [2.0, 2.0, 2.0]) == [2.0, 1.0, 0.5]
    assert ratios([1.0, math.nan, 0.0, 2.0], [3.0, 1.0, 1.0, math.nan]) == [3.0]
    assert median_range([3.0, 1.0, 2.0], ".1f") == "2.0 [1.0-3.0]"
    assert median_range([0.5, 2.0]) == "1.25 [0.50-2.00]"
    with pytest.raises(ValueError):
        median_range([])
