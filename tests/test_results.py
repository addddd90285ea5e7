"""The typed cell result (rlbench/results.py): statuses, gains, result.json's schema and its
versions, and the CLI's harness-crash exit read from `crash_by`."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import jsonschema
import pytest

from rlbench.results import (FINAL_STATUSES, SCHEMA_VERSION, CellResult, CellStatus, Gain, cell_result_schema,
                             schema_text)

REPO = Path(__file__).resolve().parents[1]
SCHEMA_FILE = REPO / "docs" / "cell_result.schema.json"
TINY = "arith-tiny"


def _gain(abs_gain: float = 0.1, greedy: Gain | None = None) -> Gain:
    return Gain(abs=abs_gain, ci_low=abs_gain - 0.05, ci_high=abs_gain + 0.05, significant=abs_gain > 0.05,
                rel_pct=25.0, rel_ci_low=10.0, rel_ci_high=40.0, win_rate=0.6, greedy=greedy)


def _validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(SCHEMA_FILE.read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


# statuses -------------------------------------------------------------------------------------
def test_final_statuses_are_every_end_but_a_crash():
    assert {s.value for s in FINAL_STATUSES} == {"ok", "no_submission", "invalid_submission", "budget_exceeded",
                                                 "harness_broken"}
    assert not CellStatus.CRASHED.final and not CellStatus.RUNNING.final
    assert [s for s in CellStatus if s.ungraded_end] == [CellStatus.NO_SUBMISSION, CellStatus.INVALID_SUBMISSION,
                                                         CellStatus.BUDGET_EXCEEDED, CellStatus.HARNESS_BROKEN]
    assert CellStatus("ok") is CellStatus.OK and f"{CellStatus.OK}" == "ok" and json.dumps(CellStatus.OK) == '"ok"'
    with pytest.raises(ValueError):
        CellStatus("finished")


def test_a_crash_is_final_when_the_agent_caused_it():
    def crashed(**kw) -> CellResult:
        return CellResult(cell="c", agent="a", task="t", seed=0, status=CellStatus.CRASHED, **kw)

    by_agent, by_harness = crashed(crash_by="agent"), crashed(crash_by="harness", reason="the agent raised X")
    assert by_agent.is_final and not by_agent.harness_crash
    assert not by_harness.is_final and by_harness.harness_crash  # crash_by decides, not the reason's words
    # results from before crash_by existed are read by their reason
    assert crashed(reason="the agent process died: killed").crashed_by == "agent"
    assert crashed(reason="harness: RuntimeError: boom").harness_crash
    broken = CellResult(cell="c", agent="a", task="t", seed=0, status=CellStatus.HARNESS_BROKEN)
    assert broken.is_final and broken.crashed_by == "agent" and not broken.harness_crash
    assert CellResult(cell="c", agent="a", task="t", seed=0, status=CellStatus.OK, crash_by="harness").crashed_by == ""


# gains ----------------------------------------------------------------------------------------
def test_gain_round_trips_with_its_greedy_gain():
    greedy = Gain(abs=0.0, ci_low=-0.02, ci_high=0.03, significant=False)
    g = _gain(greedy=greedy)
    d = g.to_dict()
    assert set(d) == {"abs", "ci_low", "ci_high", "significant", "rel_pct", "rel_ci_low", "rel_ci_high", "win_rate",
                      "greedy"}
    assert d["greedy"] == {"abs": 0.0, "ci_low": -0.02, "ci_high": 0.03, "significant": False}
    assert Gain.from_dict(json.loads(json.dumps(d))) == g
    assert Gain.from_dict(greedy.core_dict()) == greedy and g.ci == [g.ci_low, g.ci_high]
    no_greedy = Gain.from_dict({**_gain().to_dict(), "rel_pct": None, "rel_ci_low": None, "rel_ci_high": None})
    assert no_greedy.greedy is None and no_greedy.rel_pct is None and no_greedy.to_dict()["greedy"] is None
    with pytest.raises(ValueError, match="paired core"):
        Gain(abs=0.1, ci_low=0.0, ci_high=0.2, significant=True, greedy=_gain())
    with pytest.raises(ValueError, match="not a gain"):
        Gain.from_dict({"abs": 0.1})


def test_gain_without_significance_is_read_from_its_interval():
    assert Gain.from_dict({"abs": 0.1, "ci_low": 0.01, "ci_high": 0.2}).significant is True
    assert Gain.from_dict({"abs": 0.1, "ci_low": -0.01, "ci_high": 0.2}).significant is False
    assert Gain.of_interval(-0.1, -0.2, -0.01).significant is True


def test_evaluation_builds_its_gains_through_gain():
    """paired_gains' greedy gain is a Gain's paired core, result_gain a Gain's dict, and
    sampling_only_gain reads Gains and dicts alike."""
    from rlbench.evaluation.gain import paired_gains, result_gain, sampling_only_gain, split_gain

    def scored(per_item, greedy):
        return {"scores": {"test": {"pass_at_1": sum(per_item) / len(per_item), "greedy": sum(greedy) / len(greedy),
                                    "per_item": per_item, "greedy_per_item": greedy}}}

    greedy = [1.0 if i % 4 == 0 else 0.0 for i in range(100)]
    v = paired_gains(scored([0.25] * 100, greedy), scored([0.5] * 100, greedy), ("test",))["test"]
    assert set(v["greedy_gain"]) == {"abs", "ci_low", "ci_high", "significant"}
    g = split_gain(v)
    assert isinstance(g, Gain) and g.abs == pytest.approx(0.25) and g.significant and g.greedy.abs == 0.0
    assert result_gain(v) == g.to_dict() and g.win_rate == v["win_rate"] and g.rel_pct == v["rel_gain_pct"]
    assert sampling_only_gain({"test": g}) == sampling_only_gain({"test": g.to_dict()})
    assert sampling_only_gain({"test": g})["flag"] is True


# result.json ----------------------------------------------------------------------------------
def _legacy_result() -> dict:
    """A result as an older harness wrote it: no schema_version, no crash_by, gains without win
    rate or greedy gain, and a section this version does not know."""
    return {"cell": "null-arith-tiny-s0", "agent": "null", "task": TINY, "seed": 0, "status": "crashed",
            "reason": "the agent raised ValueError: bug", "sandboxed": True, "started": "2026-01-01T00:00:00Z",
            "capabilities": None, "gains": {"test": {"abs": 0.0, "ci_low": -0.1, "ci_high": 0.1, "rel_pct": None,
                                                     "rel_ci_low": None, "rel_ci_high": None, "significant": False}},
            "future_section": {"kept": [1, 2]}}


def test_an_old_result_without_schema_version_loads(tmp_path):
    path = tmp_path / "result.json"
    path.write_text(json.dumps(_legacy_result()))
    r = CellResult.load(path)
    assert r.schema_version == SCHEMA_VERSION and r.status is CellStatus.CRASHED and r.crash_by is None
    assert r.crashed_by == "agent" and r.is_final  # read by its reason, as before crash_by
    assert r.gain("test").win_rate is None and r.gain("test").greedy is None and r.finished is None
    assert r.extra == {"future_section": {"kept": [1, 2]}}
    out = r.to_json_dict()
    assert out["future_section"] == {"kept": [1, 2]} and out["schema_version"] == SCHEMA_VERSION
    assert "capabilities" not in out and "finished" not in out and "crash_by" not in out  # absent stays absent
    assert CellResult.from_dict(out).to_json_dict() == out


@pytest.mark.parametrize("change, message", [
    ({"schema_version": SCHEMA_VERSION + 1}, "schema_version"),
    ({"status": "finished"}, "finished"),
    ({"gains": {"test": {"abs": 0.1}}}, "not a gain"),
])
def test_what_is_not_a_result_of_this_version_is_refused(change, message):
    with pytest.raises(ValueError, match=message):
        CellResult.from_dict({**_legacy_result(), **change})
    bare = _legacy_result()
    del bare["seed"]
    with pytest.raises(ValueError, match="no seed"):
        CellResult.from_dict(bare)


def test_schema_file_is_what_the_code_generates():
    assert SCHEMA_FILE.read_text() == schema_text(), \
        "docs/cell_result.schema.json is stale: run `python -m rlbench.results --write`"
    schema = cell_result_schema()
    props = schema["$defs"]["CellResult"]["properties"]
    assert "extra" not in props and props["schema_version"]["const"] == SCHEMA_VERSION
    assert schema["$defs"]["CellStatus"]["enum"] == [s.value for s in CellStatus]
    assert set(schema["$defs"]["CellResult"]["required"]) == {"cell", "agent", "task", "seed", "status",
                                                              "schema_version", "reason"}


def test_a_real_cell_result_validates_and_round_trips(tmp_path, ray_cluster):
    """A null cell (no sandbox: the schema, not the sandbox, is under test) writes a result.json
    that the published schema accepts and CellResult reads back unchanged."""
    from rlbench.harness.cell import CellConfig, run_cell

    returned = run_cell(CellConfig(agent="null", task=TINY, seed=0, results=str(tmp_path), sandbox="none", grace_s=10))
    on_disk = json.loads((Path(returned.cell_dir) / "result.json").read_text())
    assert on_disk == json.loads(json.dumps(returned.to_json_dict())) and on_disk["schema_version"] == SCHEMA_VERSION
    assert on_disk["status"] == "ok" and set(on_disk["gains"]) == {"dev", "test", "heldout"}
    validator = _validator()
    errors = [e.message for e in validator.iter_errors(on_disk)]
    assert not errors, errors
    loaded = CellResult.load(Path(returned.cell_dir) / "result.json")
    assert loaded.extra == {} and isinstance(loaded.gain("test"), Gain) and loaded.to_json_dict() == on_disk
    for keys, value in ((("status",), "finished"), (("gains", "test", "abs"), "big"), (("seed",), "0"),
                        (("budget", "used_seconds"), None), (("integrity", "verdict"), "fine")):
        broken = copy.deepcopy(on_disk)
        inner = broken
        for k in keys[:-1]:
            inner = inner[k]
        inner[keys[-1]] = value
        assert not validator.is_valid(broken), keys  # the schema says something


def test_a_cell_the_harness_crashed_leaves_a_valid_result_that_says_so(tmp_path, monkeypatch):
    """A harness failure before the agent (no Ray needed) ends `crashed` by the harness, written
    through CellResult over the `running` record, and the schema accepts it."""
    import rlbench.data.splits as splits
    from rlbench.harness.cell import CellConfig, run_cell

    def lost(*args, **kwargs):
        raise RuntimeError("the disk went away")

    monkeypatch.setattr(splits, "prepare_data", lost)
    returned = run_cell(CellConfig(agent="null", task=TINY, seed=0, results=str(tmp_path), sandbox="none"))
    path = Path(returned.cell_dir) / "result.json"
    r = CellResult.load(path)
    assert r.status is CellStatus.CRASHED and r.crash_by == "harness" and r.harness_crash and not r.is_final
    assert r.reason == "harness: RuntimeError: the disk went away" and r.gains is None and r.finished
    assert json.loads(path.read_text()) == returned.to_json_dict() and returned.gains is None
    assert _validator().is_valid(returned.to_json_dict())


# the CLI's harness-crash exit -------------------------------------------------------------------
def test_rlbench_run_exits_1_on_a_harness_crash_by_crash_by_not_by_the_words(tmp_path, monkeypatch):
    """A cell the harness crashed whose reason does not start with "harness:" (its agent never
    started) fails the run; an agent's crash whose reason happens to start with it does not."""
    from typer.testing import CliRunner

    import rlbench.orchestration.suite as suite
    from rlbench.cli import app
    from rlbench.scoring.suite import score_suite

    def fake_run(crash_by: str, reason: str):
        def run_suite(spec):
            suite_dir = tmp_path / crash_by
            suite_dir.mkdir()
            results = [CellResult(cell="null-arith-tiny-s0", agent="null", task=TINY, seed=0, status=CellStatus.CRASHED,
                                  crash_by=crash_by, reason=reason, sandboxed=False)]
            (suite_dir / "scores.json").write_text(json.dumps(score_suite(results)))
            return suite_dir, results
        return run_suite

    args = ["run", "agent=null", f"task={TINY}", "sandbox=none", f"results={tmp_path}", "--quiet"]
    monkeypatch.setattr(suite, "run_suite", fake_run("harness", "the agent's process did not start within 300 s"))
    failed = CliRunner().invoke(app, args)
    assert failed.exit_code == 1 and "crashed" in failed.output, failed.output
    monkeypatch.setattr(suite, "run_suite", fake_run("agent", "harness: words the agent chose"))
    kept = CliRunner().invoke(app, args)
    assert kept.exit_code == 0, kept.output


def test_capabilities_builds_exactly_the_typed_section():
    from rlbench.results import Capabilities
    from rlbench.scoring.capabilities import capabilities

    traj = [{"tool": "exec", "seconds": 1.0, "cpu_s": 0.5, "result": {"returncode": 1, "ok": False, "max_rss_mb": 10.0}},
            {"tool": "exec", "seconds": 2.0, "cpu_s": 1.5, "result": {"returncode": 0, "ok": True}}]
    subs = [{"ok": True, "dev": 0.3, "t": 5.0, "checkpoint_hash": "h"}]
    caps = capabilities(traj, subs, "ok", base_hash="b")
    assert set(caps) == set(Capabilities.__annotations__)
    assert caps["recovery"] == 1.0 and caps["correctness"] == 0.5 and caps["execution_cpu_seconds"] == 2.0
