"""`precision=measure` / `attention=measure` in training: timed on the machine, cached, and passed
from the learner to its rollout engine; `auto` (the rule, the default) and fixed settings are never timed."""

import torch

from rlbench.engines import kernel_choice
from rlbench.engines.kernel_choice import choose_kernels
from rlbench.engines.learner import Learner, LearnerConfig
from rlbench.models.zoo import resolve_model


def test_auto_is_measured_once_then_cached_and_fixed_settings_are_not_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    tiny = resolve_model("arith-tiny").location
    probes = []
    real_probe = kernel_choice._probe

    def counting(*args, **kwargs):
        probes.append(args[1])
        return real_probe(*args, **kwargs)

    monkeypatch.setattr(kernel_choice, "_probe", counting)
    first = choose_kernels(tiny, "measure", "measure", "cpu")
    assert first.source == "measured"
    assert set(first.seconds) == {"fp32/sdpa", "fp32/eager", "bf16/sdpa", "bf16/eager"}
    assert all(s > 0 for s in first.seconds.values())
    assert first.seconds[f"{first.precision}/{first.attention}"] == min(first.seconds.values())  # the fastest
    again = choose_kernels(tiny, "measure", "measure", "cpu")
    assert (again.source, again.precision, again.attention) == ("cached", first.precision, first.attention)
    assert len(probes) == 1

    only_attention = choose_kernels(tiny, "fp32", "measure", "cpu")  # another question: measured on its own
    assert only_attention.precision == "fp32" and set(only_attention.seconds) == {"fp32/sdpa", "fp32/eager"}
    assert len(probes) == 2
    torch.set_num_threads(max(1, torch.get_num_threads() - 1) if torch.get_num_threads() > 1 else 2)
    try:  # the thread count changes which kernel wins: another cache entry
        choose_kernels(tiny, "measure", "measure", "cpu")
    finally:
        torch.set_num_threads(2)
    assert len(probes) == 3

    given = choose_kernels(tiny, "bf16", "eager", "cpu")
    assert (given.source, given.precision, given.attention, given.seconds) == ("given", "bf16", "eager", {})
    gpu = choose_kernels(tiny, "measure", "measure", "cuda")  # a GPU keeps the rule: nothing is timed there
    assert gpu.source == "rule" and gpu.attention == "sdpa"
    default = choose_kernels(tiny)  # auto, the default, is the rule: reproducible, so never timed
    assert (default.source, default.precision, default.attention) == ("rule", "fp32", "sdpa") or \
        (default.source, default.precision, default.attention) == ("rule", "bf16", "eager")
    assert choose_kernels(tiny, "fp32", "auto", "cpu").attention == "sdpa"
    assert len(probes) == 3


def test_learner_computes_with_what_was_measured(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    tiny = resolve_model("arith-tiny").location
    monkeypatch.setattr(kernel_choice, "_probe", lambda path, cands, rounds: {
        "fp32/sdpa": 2.0, "fp32/eager": 3.0, "bf16/sdpa": 4.0, "bf16/eager": 1.0})
    learner = Learner(tiny, LearnerConfig(reference_model=False, precision="measure", attention="measure"))
    assert (learner.kernels.precision, learner.kernels.attention) == ("bf16", "eager")
    assert learner.dtype == torch.bfloat16 and next(learner.module.parameters()).dtype == torch.bfloat16
    assert learner.module.config._attn_implementation == "eager"


def test_each_candidate_runs_its_own_attention_kernel():
    """from_config writes the kernel onto the config object: with one config shared, every
    candidate ran the last one's kernel, and the probe timed eager against eager."""
    tiny = resolve_model("arith-tiny").location
    cands = [("fp32", "sdpa"), ("fp32", "eager"), ("bf16", "sdpa"), ("bf16", "eager")]
    models = kernel_choice._candidate_models(tiny, cands)
    for key, (net, batch) in models.items():
        precision, attention = key.split("/")
        assert net.config._attn_implementation == attention, key
        assert next(net.parameters()).dtype == (torch.bfloat16 if precision == "bf16" else torch.float32)
        prompts, _, completions, real, group = batch
        assert completions.shape[0] == prompts.shape[0] * group and real.sum(-1).min() >= 1
