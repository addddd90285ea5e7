"""multi-skill: train holds the target skills only, test measures all three, scores cut per skill."""

from __future__ import annotations

import random
from collections import Counter

import pytest

from conftest import REPO
from rlbench.data.generators import resolve_generator, split_family
from rlbench.data.generators.multiskill import generate
from rlbench.rewards import reward_breakdown
from rlbench.rewards.skills import skill_breakdown, skill_exact, skill_of


def test_items_of_each_skill_are_right():
    rng = random.Random(0)
    for family in ("main", "targets", "heldout"):
        for _ in range(600):
            it = generate(family, rng, {})
            p, ans = it["prompt"], it["answer"]
            assert skill_of(p) == it["skill"]
            if it["skill"] == "oct":
                a, b = (int(x, 8) for x in p[1:-1].split("+"))
                assert int(ans, 8) == a + b and max(a, b) <= 127
            elif it["skill"] == "sub":
                a, b = (int(x) for x in p[:-1].split("-"))
                assert int(ans) == a - b
            else:
                a, b = (int(x) for x in p[:-1].split("+"))
                assert int(ans) == a + b
            assert (a >= b) == (family != "heldout")  # heldout: larger operand second (a negative difference)
    with pytest.raises(ValueError, match="family"):
        generate("test", rng, {})
    # the base's corpus: mostly the skill to keep, a little of each target, either operand first
    corpus = [generate("pretrain", rng, {}) for _ in range(3000)]
    shares = Counter(it["skill"] for it in corpus)
    assert 0.75 < shares["add"] / 3000 < 0.85 and shares["oct"] > 200 and shares["sub"] > 200
    assert any(int(it["answer"]) < 0 for it in corpus if it["skill"] == "sub")


def test_train_draws_the_target_skills_only_and_test_all_three(monkeypatch, tmp_path):
    gen = resolve_generator("multiskill")
    assert [split_family(gen, s) for s in ("train", "dev", "test", "heldout")] == ["targets", "main", "main", "heldout"]
    assert split_family(resolve_generator("arith"), "train") == "main"  # the default for every other generator
    from rlbench.data.splits import generate_splits
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    task = load_task("multi-skill")
    splits = generate_splits(task)
    shares = {s: Counter(it["skill"] for it in items) for s, items in splits.items()}
    assert set(shares["train"]) == {"oct", "sub"}
    for s in ("dev", "test", "heldout"):
        assert set(shares[s]) == {"add", "oct", "sub"} and min(shares[s].values()) > len(splits[s]) / 4
    assert (task.category.value, task.difficulty.value, task.model.base) == ("reasoning", "hard", "multi-s")


def test_the_breakdown_scores_each_skill():
    prompts = ["1+2=", "o7+1=", "o7+1=", "5-3=", "5-3="]
    completions = ["3", "10", "8", "2", "-2"]
    answers = ["3", "10", "10", "2", "2"]
    assert [skill_exact(c, a) for c, a in zip(completions, answers)] == [1, 1, 0, 1, 0]
    d = skill_breakdown(prompts, completions, answers)
    assert d == {"add": {"n": 1, "score": 1.0}, "oct": {"n": 2, "score": 0.5}, "sub": {"n": 2, "score": 0.5}}
    assert reward_breakdown("skill_exact", {}, prompts, completions, answers) == d
    assert skill_breakdown([], [], [])["add"] == {"n": 0, "score": None}
