"""The promise the first task rests on: the S base model has partial skill on arith-grpo.

Builds arith-s from its recipe in a fresh home (minutes on 2 cores) and scores it with the task's
own protocol on the hidden test split: pass@1 must lie in [5%, 50%] with a 95% interval no wider
than ±3 points, so that RL has room and a null agent has something to be compared with.
"""

import pytest

from rlbench.evaluation.baseline import baseline
from rlbench.models.zoo import build, load_recipe
from rlbench.tasks.registry import load_task


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_arith_s_has_partial_skill_on_arith_grpo():
    recipe = load_recipe("arith-s")
    build(recipe)
    result = baseline(load_task("arith-grpo"))
    test = result["scores"]["test"]
    assert 0.05 <= test["pass_at_1"] <= 0.50, test
    assert test["halfwidth"] <= 0.03, test
    assert result["scores"]["heldout"]["halfwidth"] <= 0.03
