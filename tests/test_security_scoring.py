"""Score gains without training, and the score cache (issue 21, holes 9 and 2).

A checkpoint's own generation settings never steer the harness's sampling; the lineage check looks
at every tensor, so a rescaled final norm is refused; a sampled gain with no greedy gain is flagged
in the result, the report and the leaderboard; the score cache is keyed by every file of the scored
folder and the evaluation code, distrusts an entry that does not add up, and no sandbox sees it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from rlbench.sandbox import bwrap_path

TINY = "arith-tiny"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
# generation settings a checkpoint could use to sharpen its own sampling
SHARPEN = {"min_p": 0.3, "top_k": 3, "temperature": 0.3, "repetition_penalty": 1.5, "eos_token_id": 5,
           "suppress_tokens": [7, 8]}
# and more that change how generation runs at all
HOSTILE_GENERATION = {**SHARPEN, "max_length": 6, "num_beams": 2, "do_sample": False, "no_repeat_ngram_size": 1}


def _base() -> Path:
    from rlbench.models.zoo import resolve_model

    return Path(resolve_model(TINY).location)


def _copy_with_generation_config(tmp_path: Path, settings: dict = HOSTILE_GENERATION, name: str = "hostile") -> Path:
    folder = tmp_path / name
    shutil.copytree(_base(), folder)
    (folder / "generation_config.json").write_text(json.dumps(settings))
    return folder


# hole 9: the checkpoint's generation settings ------------------------------------------------------
def test_checkpoint_generation_config_does_not_change_scores(tmp_path, monkeypatch, session_tasks):
    """Scored with a graded reward (int_closeness), so the untrained tiny model's per-item scores
    vary and any change in what it samples would show."""
    from conftest import write_tiny_task
    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.tasks.registry import load_task

    tasks = tmp_path / "tasks"
    shutil.copytree(session_tasks / TINY, tasks / TINY)
    write_tiny_task(tasks, "arith-tiny-close", reward={"name": "int_closeness"})
    monkeypatch.setenv("RLBENCH_TASKS", str(tasks))
    task = load_task("arith-tiny-close")
    hostile = _copy_with_generation_config(tmp_path, SHARPEN)
    base = evaluate_model(TINY, task, ("dev", "test"), use_cache=False)
    new = evaluate_model(str(hostile), task, ("dev", "test"), use_cache=False)
    for split in ("dev", "test"):
        assert new["scores"][split]["per_item"] == base["scores"][split]["per_item"], split
        assert new["scores"][split]["greedy_per_item"] == base["scores"][split]["greedy_per_item"], split
    assert len(new["scores"]["test"]["greedy_per_item"]) == len(new["scores"]["test"]["per_item"]) > 0
    assert sum(1 for v in base["scores"]["test"]["per_item"] if v) >= 10  # scores that could move


def test_tool_loop_and_loader_ignore_the_checkpoint_generation_config(tmp_path):
    """The tool loop (and any caller of load_model) samples the same tokens with or without it."""
    from rlbench.engines.hf_generate import generate
    from rlbench.engines.sampling import SamplingParams
    from rlbench.models.zoo import load_model

    hostile = _copy_with_generation_config(tmp_path)
    prompts = [f"{a}*{b}=" for a in range(12) for b in range(3)]
    outs = []
    for ref in (TINY, str(hostile)):
        model, tok, _ = load_model(ref)
        assert model.generation_config.to_diff_dict().keys() <= {"transformers_version"}  # reset at load
        model.generation_config.min_p = 0.5  # set again after the load: generate drops it too
        outs.append([[(c.token_ids, c.tool_mask) for c in cs] for cs in
                     generate(model, tok, prompts, SamplingParams(n=3, max_new_tokens=10, seed=5, tool="calculator"))])
        outs.append([[c.token_ids for c in cs] for cs in
                     generate(model, tok, prompts, SamplingParams(greedy=True, max_new_tokens=10))])
    assert outs[0] == outs[2] and outs[1] == outs[3]


# hole 9: lineage over every tensor ------------------------------------------------------------------
def test_lineage_refuses_a_rescaled_final_norm_and_accepts_reference_training(tmp_path):
    import torch
    from transformers import AutoModelForCausalLM

    from reference_pipelines.registry import load_pipeline_config, run_pipeline
    from rlbench.integrity.lineage import PREFIX, check_lineage

    base = _base()
    for factor in (8.0, 2.0, 1.5):
        model = AutoModelForCausalLM.from_pretrained(base)
        with torch.no_grad():
            model.model.norm.weight.mul_(factor)
        verdict = check_lineage(model, base)
        assert not verdict.ok and verdict.reason.startswith(PREFIX), verdict
        assert "'model.norm.weight'" in verdict.reason and "per-tensor limit" in verdict.reason, verdict
        assert verdict.drift < 0.05  # the matrices did not move: the global drift alone would pass it

    out = tmp_path / "sft"  # a short reference run that surely moves every tensor (GRPO's rewards start at zero here)
    cfg = load_pipeline_config("sft", ["task=arith-tiny", "num_threads=1", "eval_every=0", "steps=10",
                                       "batch_prompts=8", f"out={out}"])
    trained = AutoModelForCausalLM.from_pretrained(run_pipeline("sft", cfg)["checkpoint"])
    verdict = check_lineage(trained, base)
    assert verdict.ok and 0 < verdict.drift, verdict
    from rlbench.integrity.lineage import MAX_MATRIX_DRIFT, MAX_VECTOR_DRIFT

    assert MAX_VECTOR_DRIFT < MAX_MATRIX_DRIFT < 1.0  # a x2 scaling of any tensor (drift 1.0) is past its limit


def test_config_json_changes_beyond_bookkeeping_are_refused(tmp_path):
    from rlbench.grading.validate import _check_model

    ok = tmp_path / "ok"
    shutil.copytree(_base(), ok)
    cfg = json.loads((ok / "config.json").read_text())
    (ok / "config.json").write_text(json.dumps({**cfg, "use_cache": False, "transformers_version": "5.0.0"}))
    assert _check_model(ok, _base()) == ""
    bad = tmp_path / "bad"
    shutil.copytree(_base(), bad)
    (bad / "config.json").write_text(json.dumps({**cfg, "rms_norm_eps": 0.5}))
    reason = _check_model(bad, _base())
    assert "config.json differs" in reason and "rms_norm_eps" in reason, reason


# hole 9: greedy beside sampled, and the flag ----------------------------------------------------------
def _scored(per_item: list[float], greedy: list[float]) -> dict:
    return {"scores": {"test": {"pass_at_1": sum(per_item) / len(per_item), "greedy": sum(greedy) / len(greedy),
                                "per_item": per_item, "greedy_per_item": greedy}}}


def _sampled_only_gains() -> dict:
    """A sampled gain of +15 points on 200 items that moves no greedy answer."""
    from rlbench.evaluation.gain import paired_gains, result_gain

    greedy = [1.0 if i % 4 == 0 else 0.0 for i in range(200)]
    base = _scored([0.25] * 200, greedy)
    new = _scored([0.5 if i % 5 else 0.25 for i in range(200)], greedy)
    return {s: result_gain(v) for s, v in paired_gains(base, new, ("test",)).items()}


def test_sampled_gain_without_greedy_gain_is_flagged():
    from rlbench.evaluation.gain import paired_gains, result_gain, sampling_only_gain

    gains = _sampled_only_gains()
    assert gains["test"]["significant"] and gains["test"]["abs"] == pytest.approx(0.2)
    assert gains["test"]["greedy"] == {"abs": 0.0, "ci_low": 0.0, "ci_high": 0.0, "significant": False}
    flag = sampling_only_gain(gains)
    assert flag["flag"] is True and "greedy gain +0.0 points" in flag["reason"], flag

    greedy_base = [1.0 if i % 4 == 0 else 0.0 for i in range(200)]
    greedy_new = [1.0 if i % 2 == 0 else 0.0 for i in range(200)]  # RL that moved the greedy answers too
    real = paired_gains(_scored([0.25] * 200, greedy_base), _scored([0.5] * 200, greedy_new), ("test",))
    real_gains = {s: result_gain(v) for s, v in real.items()}
    assert real_gains["test"]["greedy"]["significant"] and sampling_only_gain(real_gains)["flag"] is False
    no_gain = {"test": {**gains["test"], "significant": False}}
    assert sampling_only_gain(no_gain)["flag"] is False


def _fake_result(cell_dir: Path, agent: str, gains: dict) -> dict:
    from rlbench.evaluation.gain import sampling_only_gain

    split = {"pass_at_1": 0.25, "greedy": 0.25, "ci_low": 0.2, "ci_high": 0.3, "n": 200}
    result = {"cell": cell_dir.name, "agent": agent, "task": TINY, "seed": 0, "status": "ok", "sandboxed": True,
              "started": "2026-12-04T10:00:00Z", "finished": "2026-12-04T10:05:00Z", "cell_seconds": 300.0,
              "baseline": {"test": split, "dev": split, "heldout": split},
              "scores": {"test": {"pass_at_1": 0.45, "greedy": 0.25}}, "gains": gains,
              "sampling_only_gain": sampling_only_gain(gains), "cell_dir": str(cell_dir),
              "budget": {"wall_seconds": 600, "used_seconds": 100.0, "tool_calls": 2},
              "capabilities": {"execution_seconds": 50.0, "sweep_seconds": 0.0, "peak_memory_mb": 300.0, "autonomy": 1,
                               "recovery": 1.0, "correctness": 1.0}}
    cell_dir.mkdir(parents=True)
    (cell_dir / "result.json").write_text(json.dumps(result))
    return result


def test_report_leaderboard_and_cli_show_greedy_gain_and_the_flag(tmp_path):
    from rich.console import Console

    from rlbench.cli import _cells_table
    from rlbench.reports.cell_html import write_cell_report
    from rlbench.reports.leaderboard import write_leaderboard
    from rlbench.scoring.suite import score_suite

    suite = tmp_path / "suite"
    result = _fake_result(suite / "cells" / "sharp", "sharp", _sampled_only_gains())
    (suite / "results.json").write_text(json.dumps([result]))
    paths = write_leaderboard(suite)
    board = json.loads(paths["json"].read_text())
    row, cell = board["rows"][0], board["cells"][0]
    assert row["sampling_only"] == "1/1" and row["greedy_gain"] == 0.0, row
    assert cell["sampling_only"] is True and cell["greedy_ci"] == [0.0, 0.0], cell
    header = paths["csv"].read_text().splitlines()[0].split(",")
    assert {"greedy_gain", "sampling_only"} <= set(header)
    html = paths["html"].read_text()
    assert "greedy gain" in html and "sampling only" in html and "FLAG" in html

    report, _ = write_cell_report(Path(result["cell_dir"]))
    text = report.read_text()
    assert 'id="sampling-only"' in text and "greedy 95% CI" in text

    console = Console(record=True, width=400)
    console.print(_cells_table(score_suite([result])["cells"]))
    shown = console.export_text()
    assert "sampling only" in shown and "FLAG" in shown and "greedy gain" in shown


# hole 2: the score cache ---------------------------------------------------------------------------
def test_cache_key_covers_every_file_and_edited_entries_are_recomputed(tmp_path):
    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.models.zoo import files_hash
    from rlbench.tasks.registry import load_task

    task = load_task(TINY)
    plain = tmp_path / "plain"
    shutil.copytree(_base(), plain)
    hostile = _copy_with_generation_config(tmp_path)
    assert files_hash(plain) != files_hash(hostile)
    first = evaluate_model(str(plain), task, ("dev",))
    other = evaluate_model(str(hostile), task, ("dev",))
    assert first["key"] != other["key"] and not other["cached"]
    (plain / "notes.txt").write_text("any file counts")
    assert evaluate_model(str(plain), task, ("dev",))["key"] != first["key"]
    (plain / "notes.txt").unlink()
    again = evaluate_model(str(plain), task, ("dev",))
    assert again["cached"] and again["key"] == first["key"]

    cache = Path(first["path"])
    entry = json.loads(cache.read_text())
    entry["scores"]["dev"]["pass_at_1"] = 0.99  # a forged score
    cache.write_text(json.dumps(entry))
    forged = evaluate_model(str(plain), task, ("dev",))
    assert not forged["cached"] and forged["scores"]["dev"]["pass_at_1"] == first["scores"]["dev"]["pass_at_1"]
    cache.write_text("{not json")
    assert not evaluate_model(str(plain), task, ("dev",))["cached"]
    entry = json.loads(cache.read_text())  # rewritten whole by the recompute
    entry["scores"]["dev"]["per_item"] = [1.0] * len(entry["scores"]["dev"]["per_item"])
    entry["scores"]["dev"]["pass_at_1"] = 1.0  # consistent, but the checksum no longer matches
    cache.write_text(json.dumps(entry))
    assert not evaluate_model(str(plain), task, ("dev",))["cached"]

    link = tmp_path / "linked"
    shutil.copytree(_base(), link)
    (link / "extra.json").symlink_to(plain / "config.json")
    from rlbench.config.core import ConfigError

    with pytest.raises(ConfigError, match="not a plain file"):
        files_hash(link)


def test_sandbox_cannot_see_the_scores_root(tmp_path):
    from rlbench.paths import hidden_root, home, scores_root
    from rlbench.sandbox.runner import Sandbox, SandboxConfig

    scores_root().mkdir(parents=True, exist_ok=True)
    (scores_root() / "probe.json").write_text("{}")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    args = Sandbox(workspace, SandboxConfig(), 60)._bwrap_args()
    sources = [Path(args[i + 1]).resolve() for i, a in enumerate(args) if a in ("--bind", "--ro-bind", "--dev-bind")]
    for secret in (home().resolve(), hidden_root().resolve(), scores_root().resolve()):
        for src in sources:
            assert src != secret and src not in secret.parents and secret not in src.parents, (src, secret)
    if bwrap_path() is not None:
        sandbox = Sandbox(workspace, SandboxConfig(), 60)
        seen = sandbox.run(f"ls {scores_root()} || echo hidden; cat {scores_root() / 'probe.json'} || echo hidden",
                           timeout=60)
        assert "probe.json" not in seen.stdout and seen.stdout.count("hidden") == 2, seen


# a hostile agent in a real cell --------------------------------------------------------------------
@pytest.mark.slow
@needs_bwrap
def test_sharpened_submissions_are_refused_or_score_as_the_base(tmp_path, ray_cluster):
    from rlbench.harness.cell import CellConfig, run_cell

    r = run_cell(CellConfig(agent="hostile_agents:SharpenedSampler", task=TINY, seed=0,
                            results=str(tmp_path / "results"), grace_s=10))
    assert r.status == "ok", r
    refused = r.submissions["refused"]
    assert [s["index"] for s in refused] == [1] and "lineage:" in refused[0]["reason"], refused
    assert "'model.norm.weight'" in refused[0]["reason"], refused
    assert r.integrity["verdict"] == "suspicious"
    # its second submission: the base's weights with min_p in generation_config.json score as the base
    assert r.chosen_checkpoint["index"] == 2
    assert r.scores["test"]["pass_at_1"] == r.baseline["test"]["pass_at_1"]
    assert r.gains["test"].abs == 0.0 and r.gains["test"].greedy.abs == 0.0
    assert r.sampling_only_gain["flag"] is False
