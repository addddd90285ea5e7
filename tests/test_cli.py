"""The CLI as a user runs it: a subprocess, real exit codes, real output."""

import json
import os
import subprocess

import pytest

from conftest import REPO, rlbench_cmd


def run(*args, check=True):
    proc = subprocess.run(rlbench_cmd() + list(args), capture_output=True, text=True, env=os.environ.copy(),
                          timeout=600)
    if check:
        assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc


def test_tasks_list():
    out = run("tasks", "list").stdout
    assert "arith-grpo" in out and "reasoning" in out and "implement" in out and "medium" in out


def test_tasks_show_with_override():
    out = run("tasks", "show", "arith-grpo", "eval.temperature=0.5").stdout
    assert "temperature: 0.5" in out and "description.md" in out and "pass@1" in out


def test_bad_override_fails_with_named_key():
    proc = run("tasks", "show", "arith-grpo", "eval.temprature=0.5", check=False)
    assert proc.returncode == 2
    assert "eval.temprature" in proc.stderr and "temperature" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_bad_enum_value_fails_before_work():
    proc = run("baseline", "arith-tiny", "category=fun", check=False)
    assert proc.returncode == 2 and "reasoning, alignment, specialization" in proc.stderr


def test_unknown_task_fails_clearly():
    proc = run("baseline", "nope", check=False)
    assert proc.returncode == 2 and "unknown task 'nope'" in proc.stderr and "arith-grpo" in proc.stderr


def test_models_build_and_list():
    out = run("models", "build", "arith-tiny", "--quiet").stdout
    assert "arith-tiny" in out and "parameters" in out
    listing = run("models", "list").stdout
    assert "arith-s" in listing and "arith-m" in listing and "arith-tiny" in listing


def test_baseline_prints_table_and_writes_json(tmp_path):
    target = tmp_path / "baseline.json"
    out = run("baseline", "arith-tiny", "--quiet", "--out", str(target)).stdout
    for word in ("split", "pass@1", "95% CI", "dev", "test", "heldout"):
        assert word in out
    data = json.loads(target.read_text())
    assert set(data["scores"]) == {"dev", "test", "heldout"}
    again = run("baseline", "arith-tiny", "--quiet").stdout
    assert "cached" in again


def test_run_one_cell_prints_its_result(tmp_path):
    proc = run("run", "agent=null", "task=arith-tiny", f"results={tmp_path}", "sandbox=none", "--quiet")
    assert "null" in proc.stdout and " ok " in proc.stdout and "no" in proc.stdout  # unsandboxed, said so
    result = json.loads(next(tmp_path.glob("suites/*/cells/*/result.json")).read_text())
    assert result["status"] == "ok" and result["sandboxed"] is False and result["gains"]["test"]["abs"] == 0
    bad = run("run", "agent=nobody", "task=arith-tiny", f"results={tmp_path}", check=False)
    assert bad.returncode == 2 and "unknown agent 'nobody'" in bad.stdout + bad.stderr


def test_run_refuses_a_bad_task_before_any_work(tmp_path):
    proc = run("run", "task=nope", f"results={tmp_path}", check=False)
    assert proc.returncode == 2 and "unknown task 'nope'" in proc.stderr, proc.stdout + proc.stderr
    assert not (tmp_path / "suites").exists()  # no suite folder, so no Ray and no cell either


def test_run_refuses_cuda_without_a_gpu_before_any_work(tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU: the refusal is for machines without one")
    proc = run("run", "task=arith-tiny", "device=cuda", f"results={tmp_path}", check=False)
    assert proc.returncode == 2 and "cell_gpus" in proc.stderr and "device=cuda" in proc.stderr, proc.stderr
    proc = run("run", "task=arith-tiny", "device=cuda", "cell_gpus=1", f"results={tmp_path}", check=False)
    assert proc.returncode == 2 and "no node of the cluster can hold a cell" in proc.stderr, proc.stdout + proc.stderr
    from rlbench.config.core import ConfigError
    from rlbench.harness.cell import CellConfig, run_cell

    with pytest.raises(ConfigError, match="no usable CUDA GPU"):
        run_cell(CellConfig(agent="null", task="arith-tiny", device="cuda", results=str(tmp_path / "one")))
    assert not (tmp_path / "one").exists()


def test_a_gpu_task_is_refused_on_cpu_before_any_work(tmp_path, monkeypatch):
    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    proc = run("run", "task=gsm8k-grpo", f"results={tmp_path}", check=False)
    assert proc.returncode == 2 and "runs on a GPU" in proc.stderr and "gsm8k-grpo@standin" in proc.stderr, proc.stderr
    assert not (tmp_path / "suites").exists()


def test_resume_refuses_settings_it_would_drop(tmp_path):
    suite = tmp_path / "suites" / "s"
    suite.mkdir(parents=True)
    (suite / "suite.json").write_text(json.dumps({"spec": {}, "cells": []}))
    proc = run("run", f"resume={suite}", "seeds=[3]", "budget_s=9", "rerun_crashed=false", check=False)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert "refused: budget_s=9.0, seeds=[3]" in proc.stderr and "rerun_crashed" not in proc.stderr


def test_help_keeps_its_examples():
    out = run("run", "--help").stdout
    assert '"agents=[null,reference]" "seeds=[0,1,2]"' in " ".join(out.split())


def test_a_reason_is_printed_as_it_is(tmp_path, monkeypatch):
    """Reasons are exceptions' and agents' text: brackets in them are not rich markup."""
    from typer.testing import CliRunner

    import rlbench.orchestration.suite as suite
    from rlbench.cli import app

    (tmp_path / "scores.json").write_text(json.dumps({"cells": []}))
    reason = "harness: KeyError: [bold]'x'[/bold] in [1, 2]"
    crashed = {"cell": "c", "agent": "null", "task": "arith-tiny", "seed": 0, "status": "crashed",
               "crash_by": "harness", "reason": reason}
    from rlbench.results import CellResult

    monkeypatch.setattr(suite, "run_suite", lambda spec: (tmp_path, [CellResult.from_dict(crashed)]))
    res = CliRunner().invoke(app, ["run", "task=arith-tiny", "--quiet"], terminal_width=200)
    assert reason in res.output and res.exit_code == 1, res.output


def test_report_of_a_cell_stopped_before_its_agent_ran(tmp_path):
    cell = tmp_path / "cells" / "c1"
    cell.mkdir(parents=True)
    (cell / "result.json").write_text(json.dumps({
        "cell": "c1", "agent": "null", "task": "arith-grpo", "seed": 0, "status": "crashed", "crash_by": "harness",
        "reason": "harness: ConfigError: no base model", "started": "2026-12-05T00:00:00Z",
        "finished": "2026-12-05T00:00:01Z", "cell_dir": str(cell), "config": {}}))
    proc = run("report", str(cell))
    assert "no base model" in (cell / "report.html").read_text() and "report.html" in proc.stdout
