"""Debug tasks: planted bugs, the reference agent's probes and fix, diagnosis scoring, and one
cell of a tiny debug task end to end."""

from __future__ import annotations

import contextlib
import io
import json
import runpy
import sys
from pathlib import Path

import pytest

from conftest import write_tiny_task
from rlbench.agents.reference import PROBE_PY, restore
from rlbench.sandbox.runner import bwrap_path
from rlbench.tasks.planted_bugs import (BUGS, DIAGNOSIS_FILE, PIPELINE_DIR, check_bugs, check_kinds, choose_bug,
                                        hidden_from_agent,
                                        names_kind, plant, reference_sources, score_debug)


def _run_script(folder: Path, code: str, *args: str) -> str:
    """A workspace script as the agent runs it (cwd = workspace, the script's folder on sys.path),
    in this process; `pipeline` is imported afresh each time."""
    script = folder / "script.py"
    script.write_text(code)
    for name in [m for m in sys.modules if m == "pipeline" or m.startswith("pipeline.")]:
        del sys.modules[name]
    out = io.StringIO()
    old_argv, old_path = sys.argv, list(sys.path)
    with contextlib.chdir(folder), contextlib.redirect_stdout(out):
        sys.argv, sys.path[:0] = [str(script), *args], [str(folder)]
        try:
            runpy.run_path(str(script), run_name="__main__")
        finally:
            sys.argv, sys.path[:] = old_argv, old_path
    return out.getvalue()


def test_every_bug_applies_once_and_changes_one_place():
    check_bugs()
    good = reference_sources()
    assert "if __name__ == \"__main__\":" in good["train.py"] and "from pipeline.loss import" in good["train.py"]
    assert len(BUGS) >= 6
    for bug in BUGS.values():
        assert bug.old != bug.new and bug.new not in good[bug.file], bug.kind


@pytest.mark.parametrize("kind", [None, *BUGS])
def test_reference_probes_find_exactly_the_planted_bug_and_fix_restores_it(tmp_path, kind):
    ws = tmp_path / "ws"
    if kind:
        plant(ws, kind)
    else:  # the working pipeline: no finding at all
        folder = ws / PIPELINE_DIR
        folder.mkdir(parents=True)
        for name, text in reference_sources().items():
            (folder / name).write_text(text)
    found = json.loads(_run_script(ws, PROBE_PY).strip().splitlines()[-1])
    if kind is None:
        assert found == []
        return
    assert len(found) == 1 and found[0][0] == BUGS[kind].file, found
    diagnosis = found[0][1]
    assert names_kind(diagnosis, kind), diagnosis
    assert [k for k in BUGS if k != kind and names_kind(diagnosis, k)] == [], diagnosis
    good = reference_sources()
    path = ws / PIPELINE_DIR / BUGS[kind].file
    fixed, changes = restore(path.read_text(), good[BUGS[kind].file])
    assert len(changes) == 1, changes
    was, now = changes[0].split("  ->  ")
    assert BUGS[kind].new in was and BUGS[kind].old in now, changes
    path.write_text(fixed)
    for name in ("loss.py", "train.py"):
        assert (ws / PIPELINE_DIR / name).read_text() == good[name], name
    (ws / DIAGNOSIS_FILE).write_text(f"# Diagnosis\n\n- {diagnosis}\n")
    scored = score_debug(ws, kind, "python -m pipeline.train task=. out=runs/a seed={seed}")
    assert scored["named"] and scored["diagnosed"] and scored["snippet_removed"] and scored["recipe_uses_pipeline"]


@pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
def test_debug_sandbox_hides_the_bug_table_and_the_working_pipeline(tmp_path):
    """Inside a debug cell's sandbox the planted-bug table (its source and its compiled copy) and
    the reference GRPO folder read empty, while the workspace's pipeline, the other reference
    pipelines and the SDK still work: the probes run there and find the bug."""
    import py_compile

    import rlbench.tasks.planted_bugs as planted
    from rlbench.sandbox.ownership import give_tree_to_sandbox
    from rlbench.sandbox import Sandbox, SandboxConfig

    pyc = Path(py_compile.compile(planted.__file__, doraise=True))  # what an import on the host leaves
    assert "3e-9" in pyc.read_bytes().decode("latin-1")
    ws = tmp_path / "ws"
    plant(ws, "kl_sign")
    (ws / "probe.py").write_text(PROBE_PY)
    give_tree_to_sandbox(ws)
    hide = hidden_from_agent("grpo")
    sb = Sandbox(ws, SandboxConfig(hide=hide), cell_budget_s=120)
    look = f"""
import importlib, json, os
out = {{"table": os.path.getsize({planted.__file__!r}), "pyc": os.path.getsize({str(pyc)!r}),
       "grpo": os.listdir({hide[1]!r}), "ppo": os.path.getsize({str(Path(hide[1]).parent / "ppo" / "loss.py")!r})}}
for name in ("reference_pipelines.grpo.loss", "rlbench.tasks.planted_bugs"):
    try:
        out[name] = sorted(k for k in vars(importlib.import_module(name)) if not k.startswith("__"))
    except ImportError as exc:
        out[name] = type(exc).__name__
import rlbench.sdk, rlbench.harness.workspace, reference_pipelines.common
print(json.dumps(out))
"""
    (ws / "look.py").write_text(look)
    r = sb.run("python look.py", timeout=60)
    assert r.returncode == 0, r.stderr
    seen = json.loads(r.stdout.strip().splitlines()[-1])
    assert seen["table"] == 0 and seen["pyc"] == 0 and seen["grpo"] == [] and seen["ppo"] > 0, seen
    assert seen["reference_pipelines.grpo.loss"] == seen["rlbench.tasks.planted_bugs"] == "ModuleNotFoundError", seen
    r = sb.run("python probe.py", timeout=120)
    assert r.returncode == 0, r.stderr
    found = json.loads(r.stdout.strip().splitlines()[-1])
    assert len(found) == 1 and names_kind(found[0][1], "kl_sign"), found
    open_box = Sandbox(ws, SandboxConfig(), cell_budget_s=60).run(f"wc -c < {planted.__file__}", timeout=60)
    assert int(open_box.stdout.strip()) > 0  # without `hide` the sandbox reads it: the check can tell the difference
    from rlbench.config.core import ConfigError

    with pytest.raises(ConfigError, match="sandbox.hide"):
        SandboxConfig(hide=["relative/path"]).validate()


def test_diagnosis_scoring_refuses_guesses_and_silence(tmp_path):
    kind = "advantage_sign"
    plant(tmp_path, kind)
    none = score_debug(tmp_path, kind, "python train.py seed={seed}")
    assert not none["named"] and not none["diagnosed"] and not none["snippet_removed"]
    assert not none["recipe_uses_pipeline"] and none["diagnosis_chars"] == 0
    shotgun = ("The advantage sign is flipped. Advantages are not computed per group but across prompts. "
               "The KL term has the wrong sign. The old logp is not detached. The learning rate is far too small. "
               "The reward is computed on the prompt.")
    (tmp_path / DIAGNOSIS_FILE).write_text(shotgun)
    guess = score_debug(tmp_path, kind, "")
    assert guess["named"] and not guess["diagnosed"] and len(guess["also_named"]) == len(BUGS) - 1
    (tmp_path / DIAGNOSIS_FILE).write_text("The learning rate looked fine; I could not find the problem.")
    assert not score_debug(tmp_path, kind, "")["named"]


def test_bug_choice_is_fixed_per_seed_varied_across_seeds_and_hidden(tmp_path):
    from rlbench.tasks.public import public_task
    from rlbench.tasks.registry import load_task

    picks = [choose_bug("debug-grpo", s, []) for s in range(40)]
    assert picks == [choose_bug("debug-grpo", s, []) for s in range(40)]
    assert len(set(picks)) >= 4
    assert {choose_bug("debug-grpo", s, ["lr_off", "kl_sign"]) for s in range(20)} <= {"lr_off", "kl_sign"}
    write_tiny_task(Path(__import__("os").environ["RLBENCH_TASKS"]), "debug-tiny", kind="debug",
                    debug={"pipeline": "grpo", "bugs": ["lr_off"]})
    public = public_task(load_task("debug-tiny"))
    assert public["debug"] == {"pipeline": "grpo", "bugs": []}


def test_debug_spec_is_checked():
    from rlbench.config.core import ConfigError
    from rlbench.tasks.spec import DebugConfig

    with pytest.raises(ConfigError, match="debug.bugs"):
        check_kinds(DebugConfig(pipeline="grpo", bugs=["no_such_bug"]))
    with pytest.raises(ConfigError, match="debug.pipeline"):
        DebugConfig(pipeline="ppo").validate()


@pytest.mark.slow
def test_debug_cell_end_to_end(tmp_path, ray_cluster, session_tasks):
    """A tiny debug task, the reference agent with a few-step training: the bug is recorded beside
    the workspace (never in it), found, fixed, trained with, and the diagnosis scored."""
    from rlbench.harness.cell import CellConfig, run_cell

    write_tiny_task(session_tasks, "debug-tiny", kind="debug", debug={"pipeline": "grpo", "bugs": ["missing_detach"]})
    attempts = [{"steps": 3, "batch_prompts": 4, "group_size": 2, "eval_every": 0}]
    cfg = CellConfig(agent="reference", task="debug-tiny", seed=0, results=str(tmp_path / "results"), grace_s=10,
                     sandbox="bwrap" if bwrap_path() else "none", budget_s=300,
                     agent_options={"attempts": attempts, "base_first": False})
    r = run_cell(cfg)
    assert r.status == "ok", r
    cell = Path(r.cell_dir)
    assert json.loads((cell / "debug.json").read_text())["bug"] == "missing_detach"
    ws = cell / "workspace"
    assert "missing_detach" not in (ws / "task.json").read_text() + (ws / "description.md").read_text()
    assert r.debug["bug"] == "missing_detach" and r.debug["diagnosed"], r.debug
    assert r.debug["snippet_removed"] and r.debug["recipe_uses_pipeline"], r.debug
    assert "pipeline.train" in r.chosen_checkpoint["recipe"]
    assert set(hidden_from_agent("grpo")) <= set(r.config["limits"]["hide"])  # the agent's sandbox hid them
