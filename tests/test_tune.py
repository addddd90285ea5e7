"""Designs, Ray Tune sweeps through the grading API, the robustness stage, optimize tasks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from conftest import REPO, TESTS, write_tiny_task
from rlbench.config.core import ConfigError
from rlbench.sandbox import bwrap_path

TINY = "arith-tiny"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")


# designs ------------------------------------------------------------------------------------------
def _design(**changes):
    d = {"algorithm": "grpo", "hyperparameters": {"steps": 40, "batch_prompts": 4},
         "search_space": {"lr": {"loguniform": [1e-5, 1e-3]}, "group_size": {"choice": [2, 4]},
                          "kl_coef": {"grid": [0.0, 0.01]}, "temperature": {"uniform": [0.7, 1.2]}},
         "sweep": {"num_samples": 2}}
    d.update(changes)
    return d


def test_a_valid_design_loads_and_becomes_a_tune_space():
    from ray import tune

    from rlbench.tune.design import load_design, param_space

    design = load_design(_design())
    assert design.trial_count() == 4  # 2 grid points x 2 samples
    space = param_space(design)
    assert isinstance(space["lr"], tune.search.sample.Float) and space["kl_coef"] == {"grid_search": [0.0, 0.01]}
    assert isinstance(space["group_size"], tune.search.sample.Categorical)


@pytest.mark.parametrize("changes, message", [
    ({"algorithm": "ppo2"}, "algorithm"),
    ({"algorithm": "custom"}, "entry_point"),
    ({"algorithm": "custom", "entry_point": "/etc/x.py"}, "relative"),
    ({"search_space": {"lr": {"normal": [0, 1]}}}, "search_space.lr"),
    ({"search_space": {"lr": {"loguniform": [0.0, 1e-3]}}}, "low > 0"),
    ({"search_space": {"lr": {"uniform": [1e-3, 1e-4]}}}, "low < high"),
    ({"search_space": {"lr": {"choice": []}}}, "search_space.lr.choice"),
    ({"hyperparameters": {"out": "elsewhere"}}, "the harness sets"),
    ({"hyperparameters": {"steps": 10}, "search_space": {"steps": {"choice": [5, 10]}}}, "not also fixed"),
    ({"search_space": {"learning_rate": {"choice": [1e-4]}}}, "not a setting of the grpo pipeline"),
    ({"search_space": {"lr": {"choice": [1e-4, -1.0]}}}, "lr"),  # a value the pipeline refuses
    ({"sweep": {"num_samples": 20}}, "max_trials"),
    ({"sweep": {"scheduler": "pbt"}}, "sweep.scheduler"),
    ({"colour": "blue"}, "colour"),
])
def test_bad_designs_fail_with_the_key_and_what_is_allowed(changes, message):
    from rlbench.tune.design import load_design

    with pytest.raises(ConfigError, match=message):
        load_design(_design(**changes))


def test_preprocessing_dedupes_then_limits():
    from reference_pipelines.common import preprocess

    items = [{"prompt": p, "answer": 0} for p in ["a", "b", "a", "c", "b", "d"]]
    assert [i["prompt"] for i in preprocess(items, dedupe=True)] == ["a", "b", "c", "d"]
    assert [i["prompt"] for i in preprocess(items, train_limit=3, dedupe=True)] == ["a", "b", "c"]
    assert len(preprocess(items)) == 6


def test_optimize_task_schema_checks_its_baseline_config(session_tasks, monkeypatch):
    from rlbench.tasks.registry import load_task

    write_tiny_task(session_tasks, "bad-baseline-config", baseline_config={"pipeline": "grpo", "settings": {"lr": -1}})
    with pytest.raises(ConfigError, match="lr"):
        load_task("bad-baseline-config")
    write_tiny_task(session_tasks, "bad-baseline-pipeline", baseline_config={"pipeline": "grpo2", "settings": {}})
    with pytest.raises(ConfigError, match="baseline_config.pipeline"):
        load_task("bad-baseline-pipeline")
    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    hpo = load_task("hpo-grpo")
    assert hpo.kind.value == "optimize" and hpo.baseline_config.pipeline == "grpo" and hpo.budget.max_sweeps == 2


# sweeps through the grading API --------------------------------------------------------------------
@needs_bwrap
def test_sweeps_trust_the_harness_dev_score_and_asha_stops_weak_trials(tmp_path, ray_cluster, session_tasks):
    from rlbench.harness.cell import CellConfig, run_cell

    # the S model: it scores well above zero on dev, so a broken checkpoint shows (the tiny one is near 0)
    write_tiny_task(session_tasks, "sweep-s", model={"base": "arith-s", "scale": None})
    r = run_cell(CellConfig(agent="sweep_agents:Sweeper", task="sweep-s", seed=0, results=str(tmp_path), grace_s=10,
                            wandb=True))
    assert r.status == "ok", r
    cell = Path(r.cell_dir)
    steps = [json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()]
    sweeps = [s for s in steps if s["tool"] == "sweep"]
    assert [s["result"]["ok"] for s in sweeps] == [False, True, True, False]
    assert "algorithm" in sweeps[0]["result"]["error"]  # refused with the key, not counted
    assert "limit" in sweeps[3]["result"]["error"]

    first = sweeps[1]["result"]
    trials = {t["config"]["variant"]: t for t in first["trials"]}
    assert trials["broken:0.99"]["last_dev"] == 0.99  # what the trial claimed ...
    # ... is not what counts: its zeroed weights are refused (the lineage check), never scored
    assert trials["broken:0.99"]["harness_dev"] is None and "lineage" in trials["broken:0.99"]["error"], trials
    assert trials["good:0.1"]["harness_dev"] > 0
    assert first["best"]["config"]["variant"] == "good:0.1"
    assert trials["crash:0.5"]["status"] == "error" and "fails on purpose" in trials["crash:0.5"]["error"]
    runs = (cell / "workspace" / "trial_runs.log").read_text()
    assert "threads=1" in runs and "limit=40" in runs and "seed=0" in runs  # the harness's trial settings

    asha = {t["config"]["variant"]: t["status"] for t in sweeps[2]["result"]["trials"]}
    assert asha["good:0.9"] == "finished" and "stopped" in asha.values(), asha

    # recorded outside the workspace, and the best checkpoint's recipe came with it
    assert (cell / "sweeps" / "001" / "trials.csv").read_text().count("\n") == 4
    assert (cell / "sweeps" / "001" / "tune").is_dir() and not (cell / "workspace" / "sweeps" / "001" / "tune").exists()
    assert r.sweeps[0]["best"]["trial"] == first["best"]["trial"] and len(r.sweeps) == 2
    # the trials' CPU seconds, measured in their workers, count as the agent's compute
    assert first["cpu_s"] > 0 and r.sweeps[0]["cpu_s"] == first["cpu_s"]
    assert r.compute["sweep_cpu_s"] == pytest.approx(sum(s["cpu_s"] for s in r.sweeps), abs=0.05)
    assert r.compute["cpu_s"] >= r.compute["sweep_cpu_s"]
    assert "fake_train.py" in r.chosen_checkpoint["recipe"] and "{seed}" in r.chosen_checkpoint["recipe"]
    trial_runs = list((cell / "wandb").rglob("offline-run-*"))  # every Tune trial, logged offline by Ray's callback
    assert len(trial_runs) >= 7, trial_runs


RESUME_SCRIPT = """
import sys
from pathlib import Path
from rlbench.tune.design import load_design
from rlbench.tune.sweep import SweepJob, run_sweep
from rlbench.sandbox.runner import SandboxConfig
from rlbench.config.core import to_dict
ws, folder = Path(sys.argv[1]), Path(sys.argv[2])
job = SweepJob(load_design(ws / "design.yaml"), ws, folder, "sweeps/001", to_dict(SandboxConfig()), 300, max_concurrent=1)
print(run_sweep(job, lambda p: 0.5)["best"]["trial"])
"""


@needs_bwrap
def test_a_killed_sweep_resumes_without_rerunning_finished_trials(tmp_path, ray_cluster):
    from sweep_agents import FAKE_TRAIN, design

    from rlbench.data.splits import prepare_data
    from rlbench.harness.workspace import build_workspace
    from rlbench.sandbox.ownership import give_tree_to_sandbox
    from rlbench.models.zoo import resolve_model
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task(TINY)
    data = prepare_data(task, task_dir(TINY))
    ws = build_workspace(tmp_path / "ws", task, task_dir(TINY), Path(resolve_model(task.model.base).location),
                         data.splits["train"], data.splits["dev"]).root.resolve()
    (ws / "fake_train.py").write_text(FAKE_TRAIN)
    (ws / "design.yaml").write_text(yaml.safe_dump(design(["good:0.1", "good:0.2", "good:0.3"], pause=0.8)))
    (ws / "sweeps" / "001").mkdir(parents=True)
    give_tree_to_sandbox(ws)
    folder = tmp_path / "sweep"
    (tmp_path / "resume.py").write_text(RESUME_SCRIPT)
    env = {**os.environ, "PYTHONPATH": f"{TESTS}{os.pathsep}{REPO}"}
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.Popen([sys.executable, str(tmp_path / "resume.py"), str(ws), str(folder)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    log = ws / "trial_runs.log"
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and (not log.exists() or log.read_text().count("\n") < 2):
        time.sleep(0.5)  # the second trial has started: the first one is finished
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert log.read_text().count("\n") >= 2, "the sweep never reached its second trial"

    from rlbench.tune.design import load_design
    from rlbench.tune.sweep import SweepJob, run_sweep
    from rlbench.config.core import to_dict
    from rlbench.sandbox.runner import SandboxConfig

    job = SweepJob(load_design(ws / "design.yaml"), ws, folder, "sweeps/001", to_dict(SandboxConfig()), 300,
                   max_concurrent=1)
    summary = run_sweep(job, lambda p: 0.5)
    runs = log.read_text().splitlines()
    assert sorted(t["status"] for t in summary["trials"]) == ["finished"] * 3, summary["trials"]
    assert sum(1 for line in runs if line.startswith("good:0.1 ")) == 1, runs  # finished before the kill: kept
    assert sum(1 for line in runs if line.startswith("good:0.3 ")) == 1, runs


# the robustness stage and optimize tasks -----------------------------------------------------------
@needs_bwrap
@pytest.mark.slow
def test_reference_agent_on_an_optimize_task_and_the_robustness_stage(tmp_path, ray_cluster, session_tasks):
    from rlbench.robustness.rerun import RobustnessConfig, run_robustness
    from rlbench.harness.cell import CellConfig, run_cell

    settings = {"steps": 16, "batch_prompts": 4, "group_size": 2, "lr": 1e-5, "kl_coef": 0.1, "eval_every": 8}
    # graded reward: the canonical arith-tiny never answers exactly, so exact_int would give every
    # group zero advantage, no update, and the same checkpoint on every seed
    write_tiny_task(session_tasks, "hpo-tiny", kind="optimize", baseline_config={"pipeline": "grpo", "settings": settings},
                    reward={"name": "int_closeness"},
                    budget={"wall_seconds": 400, "max_submissions": 3, "max_sweeps": 1, "device": "cpu", "cpus": 2,
                            "memory_gb": 8})
    options = {"num_samples": 2, "report_every": 8,
               "search_space": {"lr": {"choice": [1e-4, 3e-4]}, "group_size": {"choice": [4]}}}
    r = run_cell(CellConfig(agent="reference", task="hpo-tiny", seed=0, results=str(tmp_path), grace_s=10,
                            agent_options=options))
    assert r.status == "ok", r
    assert [s["tool"] for s in json.loads("[" + ",".join((Path(r.cell_dir) / "trajectory.jsonl").read_text()
                                                         .splitlines()) + "]")][:4] == ["read", "read", "write", "sweep"]
    vs = r.vs_baseline_config
    assert vs["settings"]["settings"] == settings and set(vs["gains"]) == {"test", "heldout"}
    g = vs["gains"]["test"]
    assert g["ci_low"] <= g["abs"] <= g["ci_high"]
    assert r.capabilities["autonomy"] and r.capabilities["best_dev"] is not None
    recipe = r.chosen_checkpoint["recipe"]
    assert "'seed={seed}'" in recipe and "lr=" in recipe

    summary = run_robustness(Path(r.cell_dir), RobustnessConfig(seeds=2, scale=False))
    assert [run["seed"] for run in summary["runs"]] == [0, 1] and summary["succeeded"] == 2, summary
    assert summary["seed_varied"] and summary["seeds"]["test"]["n"] == 2 and summary["seeds"]["test"]["sd"] is not None
    cell = Path(r.cell_dir)
    reruns = [json.loads((cell / "robustness" / f"base-s{s}" / "result.json").read_text()) for s in (0, 1)]
    assert reruns[0]["checkpoint_hash"] == r.chosen_checkpoint["hash"]  # seed 0 reproduces the submission
    assert reruns[1]["checkpoint_hash"] != reruns[0]["checkpoint_hash"]
    assert "'seed=1'" in reruns[1]["command"]
    again = run_robustness(cell, RobustnessConfig(seeds=2, scale=False))  # finished reruns are kept
    assert again["runs"] == summary["runs"]
    assert json.loads((cell / "result.json").read_text())["robustness"]["succeeded"] == 2


@needs_bwrap
def test_robustness_refuses_a_cell_without_a_recipe(tmp_path, ray_cluster):
    from conftest import rlbench_cmd
    from rlbench.harness.cell import CellConfig, run_cell
    from rlbench.robustness.rerun import run_robustness

    r = run_cell(CellConfig(agent="null", task=TINY, seed=0, results=str(tmp_path), grace_s=10))
    with pytest.raises(ConfigError, match="no recipe"):
        run_robustness(Path(r.cell_dir))
    with pytest.raises(ConfigError, match="not a cell folder"):
        run_robustness(tmp_path)
    cli = subprocess.run(rlbench_cmd() + ["robustness", r.cell_dir, "seeds=2"], capture_output=True, text=True,
                         timeout=300)
    assert cli.returncode == 2 and "no recipe" in cli.stderr, cli.stderr


@needs_bwrap
def test_a_recipe_given_through_the_grade_command_is_rerun(tmp_path, ray_cluster):
    from conftest import rlbench_cmd
    from rlbench.harness.cell import CellConfig, run_cell

    r = run_cell(CellConfig(agent="sweep_agents:GradeCli", task=TINY, seed=3, results=str(tmp_path), grace_s=10))
    assert r.status == "ok" and r.chosen_checkpoint["recipe"] == "echo seed={seed} > seed.txt", r
    steps = [json.loads(line) for line in (Path(r.cell_dir) / "trajectory.jsonl").read_text().splitlines()]
    assert "usage: grade" in steps[0]["result"]["stderr"]
    cli = subprocess.run(rlbench_cmd() + ["robustness", r.cell_dir, "seeds=2", "--quiet"], capture_output=True,
                         text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(TESTS)})
    assert cli.returncode == 0, cli.stdout[-2000:] + cli.stderr[-2000:]
    assert "across 2 seeds" in cli.stdout and "base" in cli.stdout
    cell = Path(r.cell_dir)
    for seed in (3, 4):  # the cell's seed and the next; the base model resubmitted gains exactly nothing
        rerun = json.loads((cell / "robustness" / f"base-s{seed}" / "result.json").read_text())
        assert rerun["status"] == "ok" and rerun["gains"]["test"]["abs"] == 0.0, rerun
        assert (cell / "robustness" / f"base-s{seed}" / "workspace" / "seed.txt").read_text().strip() == f"seed={seed}"
