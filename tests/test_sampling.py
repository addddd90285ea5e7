"""SamplingParams: one validated value carries every generation setting, the same through every
path (hf_generate, the rollout engine, the pipelines), so no caller drops a setting unnoticed."""

from __future__ import annotations

from dataclasses import FrozenInstanceError, replace
from pathlib import Path

import pytest

from rlbench.config.core import ConfigError
from rlbench.engines.sampling import SamplingParams

REPO = Path(__file__).resolve().parents[1]
PROMPTS = [f"{a}+{b}=" for a in range(0, 60, 13) for b in (3, 9)]
CALC_PROMPTS = [f"{a}*{b}=" for a in (874, 123, 907, 456, 388, 619) for b in (51, 37)]


@pytest.mark.parametrize("field,value,allowed", [
    ("n", 0, ">= 1"),
    ("temperature", 0.0, "> 0"),
    ("temperature", -0.5, "> 0"),
    ("top_p", 0.0, "in (0, 1]"),
    ("top_p", 1.5, "in (0, 1]"),
    ("max_new_tokens", 0, ">= 1"),
    ("max_calls", -1, ">= 0"),
])
def test_sampling_params_refuse_each_bad_value_by_name(field, value, allowed):
    with pytest.raises(ConfigError) as err:
        SamplingParams(**{field: value})
    msg = str(err.value)
    assert f"'{field}'" in msg and f"'{value}'" in msg and allowed in msg, msg
    with pytest.raises(ConfigError, match=field):  # dataclasses.replace validates too
        replace(SamplingParams(), **{field: value})


def test_sampling_params_edges_frozen_and_per_prompt():
    sp = SamplingParams(n=4, top_p=1.0, max_calls=0, max_new_tokens=1, stop_ids=[5, 7])
    assert sp.stop_ids == (5, 7) and hash(sp) == hash(replace(sp))  # a list is kept as a tuple
    assert sp.per_prompt == 4 and replace(sp, greedy=True).per_prompt == 1
    with pytest.raises(FrozenInstanceError):
        sp.n = 2  # type: ignore[misc]


@pytest.mark.parametrize("zoo,prompts,sp", [
    ("arith-tiny", PROMPTS, SamplingParams(n=3, temperature=1.3, top_p=0.9, max_new_tokens=6, seed=11)),
    ("arith-tiny", PROMPTS, SamplingParams(greedy=True, max_new_tokens=6)),
    # calc-s calls the calculator on some of these: continuations, with their own seeds, are compared too
    ("calc-s", CALC_PROMPTS, SamplingParams(n=3, max_new_tokens=20, seed=5, tool="calculator", max_calls=2)),
], ids=["sampled", "greedy", "tool"])
def test_rollout_engine_and_hf_generate_sample_the_same_tokens(zoo, prompts, sp):
    """The same value through RolloutEngine (its own model copy, its own batch size) and through
    hf_generate.generate directly: the same completions, token for token."""
    from rlbench.engines.hf_generate import generate
    from rlbench.engines.rollout import RolloutEngine
    from rlbench.models.zoo import load_model

    model, tok, resolved = load_model(zoo)
    engine = RolloutEngine(resolved.location, backend="hf", batch_size=7)
    ids = lambda out: [[(c.token_ids, c.tool_mask) for c in comps] for comps in out]  # noqa: E731
    via_engine = engine.generate(prompts, sp)
    direct = generate(model, tok, prompts, sp, batch_size=64)
    assert ids(via_engine) == ids(direct)
    if sp.tool:
        assert any(c.tool_calls for comps in direct for c in comps), "no call made: the loop went untested"
    assert all(len(comps) == sp.per_prompt for comps in direct)
    assert all(len(c.token_ids) <= sp.max_new_tokens for comps in direct for c in comps)
    if not sp.greedy:  # the seed is in the value: another seed, other tokens
        assert ids(generate(model, tok, prompts, replace(sp, seed=sp.seed + 1))) != ids(direct)


@pytest.mark.parametrize("name", ["grpo", "ppo", "dpo"])
def test_pipeline_configs_build_the_same_sampling(name, monkeypatch):
    """Every pipeline's rollouts carry its temperature, top_p and length, and the task's tool."""
    from reference_pipelines.registry import config_class
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    cfg = config_class(name)(temperature=0.8, top_p=0.9)
    calc, arith = load_task("tool-calc"), load_task("arith-grpo")
    sp = cfg.sampling(4, 17, calc)
    assert sp == SamplingParams(n=4, temperature=0.8, top_p=0.9, max_new_tokens=calc.eval.max_new_tokens, seed=17,
                                tool="calculator", max_calls=calc.tools.max_calls)
    cfg.max_new_tokens = 5
    assert cfg.sampling(2, 3, arith) == SamplingParams(n=2, temperature=0.8, top_p=0.9, max_new_tokens=5, seed=3)


class _FirstRollout(Exception):
    """Raised by the spy at a run's first rollout: what was asked is all the test needs."""


@pytest.mark.parametrize("name,extra", [
    ("grpo", ["group_size=3"]),
    ("ppo", ["samples_per_prompt=3"]),
    ("dpo", ["samples_per_prompt=3", "pair_prompts=8"]),
])
def test_each_pipeline_rolls_out_with_its_config_sampling(name, extra, monkeypatch, tmp_path):
    """A real run up to its first rollout: the settings it asks for are the config's (ppo and dpo
    once sampled without top_p)."""
    from reference_pipelines import common
    from reference_pipelines.registry import load_pipeline_config, run_pipeline

    seen = []

    def spy(self, prompts, sampling):
        seen.append(sampling)
        raise _FirstRollout

    monkeypatch.setattr(common.Rollout, "generate", spy)
    cfg = load_pipeline_config(name, ["task=arith-tiny", "model=arith-tiny", "num_threads=1", "batch_prompts=4",
                                      "temperature=0.7", "top_p=0.8", "max_new_tokens=7", "seed=2",
                                      f"out={tmp_path / name}", *extra])
    with pytest.raises(_FirstRollout):
        run_pipeline(name, cfg)
    [sp] = seen
    assert (sp.n, sp.temperature, sp.top_p, sp.max_new_tokens, sp.tool, sp.greedy) == (3, 0.7, 0.8, 7, "", False)
