from rlbench.evaluation.baseline import baseline
from rlbench.evaluation.stats import mean_ci, wilson_ci
from rlbench.tasks.registry import load_task


def test_baseline_deterministic_and_cached():
    task = load_task("arith-tiny")
    first = baseline(task, use_cache=False)
    second = baseline(task, use_cache=False)
    for split in ("dev", "test", "heldout"):
        assert first["scores"][split] == second["scores"][split]
        s = first["scores"][split]
        assert s["n"] == getattr(task.data.sizes, split)
        assert 0 <= s["ci_low"] <= s["pass_at_1"] <= s["ci_high"] <= 1
        assert len(s["per_item"]) == s["n"]
    cached = baseline(task)
    assert cached["cached"] and cached["scores"] == first["scores"]


def test_protocol_change_misses_cache():
    a = baseline(load_task("arith-tiny"))
    b = baseline(load_task("arith-tiny", ["eval.seed=99"]))
    assert a["key"] != b["key"] and not b["cached"]


def test_scorer_counts_correct_answers():
    """Items whose gold answer is what the model writes greedily score 1.0 greedy; shifted by one, 0."""
    from rlbench.engines.hf_generate import generate
    from rlbench.engines.sampling import SamplingParams
    from rlbench.evaluation.engine import ScoringModel
    from rlbench.evaluation.score import score_split
    from rlbench.models.zoo import load_model
    from rlbench.rewards.exact import parse_int_answer

    task = load_task("arith-tiny")
    model, tok, _ = load_model("arith-tiny")
    prompts = [f"{a}+{b}=" for a in range(0, 90, 7) for b in (1, 2)]
    outs = generate(model, tok, prompts, SamplingParams(greedy=True, max_new_tokens=task.eval.max_new_tokens))
    parsed = [(p, parse_int_answer(o[0].text)) for p, o in zip(prompts, outs)]
    items = [{"prompt": p, "answer": str(v)} for p, v in parsed if v is not None]
    assert items, "the tiny model writes no integer at all"
    scorer = ScoringModel("hf", "arith-tiny", model=model, tokenizer=tok)
    assert score_split(scorer, items, "x", task).greedy == 1.0
    wrong = [{"prompt": it["prompt"], "answer": str(int(it["answer"]) + 1)} for it in items]
    assert score_split(scorer, wrong, "x", task).greedy == 0.0


def test_mean_ci_and_wilson_hand_computed():
    mean, lo, hi = mean_ci([0.0, 1.0, 0.5, 0.5])
    assert mean == 0.5
    # sd = sqrt(1/6), se = sd/2, half = 1.96*0.2041 = 0.4001
    assert abs((hi - lo) / 2 - 0.40008) < 1e-3
    p, lo, hi = wilson_ci(0, 10)
    assert p == 0 and lo == 0 and 0.27 < hi < 0.29
    p, lo, hi = wilson_ci(50, 100)
    assert abs(lo - 0.4038) < 1e-3 and abs(hi - 0.5962) < 1e-3
