"""truth-tellers: its puzzles are consistent and need the whole chain; the verifier reads the
answer after the trace."""

from __future__ import annotations

import random

import pytest

from rlbench.data.generators.liars import PEOPLE, generate, solve, worked
from rlbench.rewards import get_reward
from rlbench.rewards.deduce import final_answer, trace_kinds, yes_no


def _brute_force(prompt: str) -> str:
    """The answer by trying every assignment of kinds and keeping the consistent one."""
    statements, question = prompt.split(";")
    parts = [(s[0], s[1:]) for s in statements.split(",")]
    names = [n for n, _ in parts]
    from itertools import product

    fits = []
    for kinds in product((True, False), repeat=len(names)):
        k = dict(zip(names, kinds))
        ok = True
        for name, said in parts:
            if said in ("T", "F"):
                ok &= k[name] == (said == "T")
                continue
            about, claim = PEOPLE[PEOPLE.index(name) - 1], said == "+"  # the one before
            ok &= (k[about] == claim) == k[name]  # a truth-teller's claim is true, a liar's false
        if ok:
            fits.append(k)
    assert len(fits) == 1  # a puzzle has exactly one solution
    return "y" if fits[0][question.rstrip("?")] else "n"


def test_puzzles_have_one_solution_and_the_trace_is_it():
    rng = random.Random(0)
    sizes = {"main": set(), "heldout": set()}
    answers, orders = [], set()
    for family in ("main", "heldout"):
        for _ in range(800):
            it = generate(family, rng, {"trace_share": 0.3})
            assert it["answer"] == _brute_force(it["prompt"])
            chain = solve(it["prompt"])
            sizes[family].add(len(chain))
            names = [s[0] for s in it["prompt"].split(";")[0].split(",")]
            assert len(set(names)) == len(names) and set(names) <= set(PEOPLE) and not set(names) & {"y", "n"}
            assert [n for n, _ in chain] == sorted(names) and it["prompt"].endswith(f";{chain[-1][0]}?")
            orders.add(tuple(names))
            if it["trace"] != it["answer"]:
                assert trace_kinds(it["trace"]) == chain and final_answer(it["trace"]) == it["answer"]
            answers.append(it["answer"])
            if it["trace"] != it["answer"]:
                assert it["trace"].startswith(worked(it["prompt"]))
    assert sizes == {"main": {5, 6}, "heldout": {7, 8}}
    assert {len(solve(generate("short", rng, {})["prompt"])) for _ in range(100)} == {2, 3, 4}
    assert len(orders) > 1000  # the statements come shuffled: the chain must be found by name
    assert 0.45 < answers.count("y") / len(answers) < 0.55
    # the answer is the parity of the chain: flipping any one claim flips it
    it = generate("main", random.Random(3), {})
    head, tail = it["prompt"].split(";")
    i = max(head.rfind("+"), head.rfind("-"))
    flipped = head[:i] + ("-" if head[i] == "+" else "+") + head[i + 1:] + ";" + tail
    assert _brute_force(flipped) != it["answer"]
    with pytest.raises(ValueError, match="family"):
        generate("test", rng, {})
    with pytest.raises(ValueError, match="trace_share"):
        generate("main", rng, {"trace_share": 2})
    with pytest.raises(ValueError, match="trace_share"):
        generate("short", rng, {"trace_share": -1})


@pytest.mark.parametrize("completion,answer,want", [
    ("y", "y", 1.0), (" n\n", "n", 1.0), ("n", "y", 0.0), ("", "y", 0.0), ("yes", "y", 1.0),
    ("aTb-Fc-T;y", "y", 1.0), ("aTb-Fc-T;n", "y", 0.0), ("aTb-F;n;y", "y", 1.0),  # the last `;` wins
    ("aTb-Fc-T;", "y", 0.0), ("aTb-Fy", "y", 0.0), ("Y", "y", 0.0), ("?", "n", 0.0),
])
def test_the_answer_after_the_trace_is_what_counts(completion, answer, want):
    assert yes_no(completion, answer) == want and get_reward("yes_no") is yes_no


def test_trace_kinds_parses_only_a_well_formed_trace():
    assert trace_kinds("aTb-Fc+Fd-T;y") == [("a", True), ("b", False), ("c", False), ("d", True)]
    assert trace_kinds("aF;n") == [("a", False)] and trace_kinds(" aTb+T ;y") == [("a", True), ("b", True)]
    assert trace_kinds("y") == [] and trace_kinds("aTb-x;y") == [] and trace_kinds(";n") == []
    assert trace_kinds("aTb-;y") == [] and trace_kinds("ATb-F;n") == [] and trace_kinds("aTbF;n") == []
    assert trace_kinds("aTb*F;n") == [] and trace_kinds("aTb-Fc;n") == []
    assert final_answer("aT; n") == "n" and final_answer("maybe") == ""


def test_the_task_loads_and_its_items_carry_no_trace(monkeypatch, tmp_path):
    from conftest import REPO
    from rlbench.data.splits import generate_splits
    from rlbench.harness.workspace import visible_items
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    task = load_task("truth-tellers")
    assert (task.category.value, task.model.base, task.reward.name) == ("reasoning", "liars-s", "yes_no")
    splits = generate_splits(task)
    assert all(it["trace"] == it["answer"] for it in splits["train"])  # the task's own share is 0
    assert all("trace" not in it for it in visible_items(task, splits["train"]))


def test_the_breakdown_says_how_often_the_model_reasoned_and_how_well():
    from rlbench.rewards import reward_breakdown
    from rlbench.rewards.deduce import deduce_breakdown

    completions = ["aTb-F;n", "aTb+T;n", "y", "n", "aTb;y"]  # the last: not a well-formed trace
    answers = ["n", "y", "y", "y", "y"]
    d = deduce_breakdown([""] * 5, completions, answers)
    assert d == {"n": 5, "traced": 0.4, "accuracy_traced": 0.5, "accuracy_at_once": pytest.approx(2 / 3, abs=1e-3)}
    assert reward_breakdown("yes_no", {}, [""] * 5, completions, answers) == d
    assert deduce_breakdown([], [], [])["traced"] is None


def test_the_pinned_base_can_work_the_chain_out_and_seldom_does(monkeypatch, tmp_path):
    """What the task rests on: made to start a trace (the prompt, then `a`), the base finishes it
    right; left alone it traces in a minority of samples and answers at once at chance."""
    from conftest import REPO
    from rlbench.engines.hf_generate import generate as sample
    from rlbench.engines.sampling import SamplingParams
    from rlbench.models.zoo import load_model, pins
    from rlbench.rewards.deduce import deduce_breakdown
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    task = load_task("truth-tellers")
    assert task.model.base in pins(), "the base must be a canonical, pinned artifact"
    model, tok, _ = load_model(task.model.base)
    rng = random.Random(11)
    items = [generate("main", rng, {}) for _ in range(150)]
    prompts, answers = [it["prompt"] for it in items], [it["answer"] for it in items]
    forced = sample(model, tok, [p + "a" for p in prompts], SamplingParams(greedy=True, max_new_tokens=32))
    right = [trace_kinds("a" + o[0].text) == solve(p) for p, o in zip(prompts, forced)]
    assert sum(right) / len(right) >= 0.85
    free = sample(model, tok, prompts, SamplingParams(n=2, temperature=1.0, max_new_tokens=32, seed=5))
    d = deduce_breakdown(prompts * 2, [o.text for outs in free for o in outs], [a for a in answers for _ in (0, 1)])
    assert 0.15 <= d["traced"] <= 0.6 and d["accuracy_traced"] >= 0.85 and 0.35 <= d["accuracy_at_once"] <= 0.65, d
