"""The CLI as a user runs it: a subprocess, real exit codes, real output."""

import json
import os
import subprocess

from conftest import rlbench_cmd


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
