"""The task suite's pieces: its tasks load, the reward endpoint, claims, KL, win rate, validation verdicts."""

from __future__ import annotations

import json
import random

import pytest

from conftest import REPO
from rlbench.data.generators.words import apply, generate
from rlbench.evaluation.gain import win_rate
from rlbench.grading.rewards import RewardService
from rlbench.rewards import get_reward
from rlbench.scoring.claims import score_claim
from rlbench.orchestration.validation import judge


def test_every_repo_task_loads(monkeypatch):
    from rlbench.tasks.registry import list_tasks

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    tasks = {t.name: t for t in list_tasks()}
    assert {"arith-grpo", "hpo-grpo", "format-if", "pref-ppo", "eval-claims", "novel-algo", "kl-constrained",
            "debug-grpo", "tool-calc"} <= set(tasks)
    kinds = {t.kind.value for t in tasks.values()}
    assert kinds == {"design", "implement", "debug", "optimize", "evaluate"}, kinds
    assert {t.category.value for t in tasks.values()} == {"reasoning", "alignment", "specialization"}
    hidden = [t for t in tasks.values() if t.reward.access.value == "endpoint"]
    # at least 40% give the agent no answers. octal-adapt, honest-arith and multi-skill are local on
    # purpose: their skill is one the base never shows (an abstention, a subtraction, octal carries),
    # so rewards alone, with no label, would never reach it
    assert len(hidden) * 5 >= len(tasks) * 2, (len(hidden), len(tasks))


def test_words_answers_follow_the_ops():
    assert apply("CR", ["key", "bee", "yak"]) == "yak,bee,key"
    assert apply("1T", ["eel", "ice"]) == "Eel"
    assert apply("UK", ["ram", "rat"]) == "RAM RAT ok"
    rng = random.Random(0)
    main = [generate("main", rng, {}) for _ in range(300)]
    held = [generate("heldout", rng, {}) for _ in range(300)]
    assert not any(set(it["prompt"].split(":")[0]) & {"D", "K"} for it in main)
    assert all(set(it["prompt"].split(":")[0]) & {"D", "K"} for it in held)


def test_graded_and_text_rewards():
    close = get_reward("int_closeness")
    assert close("82", "82") == 1.0 and close("92", "82") == 0.25 and close("x", "82") == 0.0 and close("200", "82") == 0.0
    assert get_reward("exact_text")(" yak,bee \n", "yak,bee") == 1.0


def test_reward_service_counts_logs_and_refuses(tmp_path):
    from rlbench.tasks.spec import TaskConfig

    task = TaskConfig()
    task.reward.name = "exact_int"
    log = tmp_path / "q.jsonl"
    svc = RewardService(task, [{"id": "train-00000", "answer": "5"}, {"id": "train-00001", "answer": "7"}], 3, log)
    assert svc.query(["train-00000", "train-00001"], ["5", "8"]) == {"ok": True, "rewards": [1.0, 0.0], "queries_left": 1}
    assert not svc.query(["dev-00000"], ["5"])["ok"]  # only train ids
    over = svc.query(["train-00000", "train-00000"], ["5", "5"])
    assert not over["ok"] and over["queries_left"] == 1  # refused whole: the count stays exact
    assert svc.summary() == {"limit": 3, "used": 2, "requests": 1}
    assert json.loads(log.read_text().splitlines()[0])["rewards"] == [1.0, 0.0]


def test_claim_scoring():
    measured = {"abs": 0.10, "ci_low": 0.08, "ci_high": 0.12}
    c = score_claim({"test_gain": 0.12, "ci": [0.05, 0.15]}, measured)
    assert c["made"] and c["covered"] and c["abs_error"] == pytest.approx(0.02)
    assert not score_claim({"test_gain": 0.3, "ci": [0.25, 0.35]}, measured)["covered"]
    assert score_claim(None, measured)["made"] is False


def test_win_rate_counts_ties_half():
    w = win_rate([0.0, 0.5, 1.0, 0.5], [1.0, 0.5, 0.0, 1.0])
    assert w["win_rate"] == pytest.approx((1 + 0.5 + 0 + 1) / 4)


def _row(agent, seed, lo, hi, seconds=100.0, **extra):
    return {"agent": agent, "seed": seed, "status": "ok", "test_ci": [lo, hi], "cell": f"{agent}-{seed}",
            "cell_seconds": seconds, **extra}


def test_validation_verdicts():
    null = [_row("null", s, 0.0, 0.0) for s in range(3)]
    good = [_row("reference", 0, 0.1, 0.2), _row("reference", 1, 0.05, 0.1), _row("reference", 2, -0.01, 0.1)]
    assert judge(null + good, 3, 1200)["passed"]
    weak = good[:1] + [_row("reference", 1, -0.1, 0.1), _row("reference", 2, -0.01, 0.1)]
    assert not judge(null + weak, 3, 1200)["checks"]["reference_above_zero"]["ok"]
    slow = null + good[:2] + [_row("reference", 2, 0.1, 0.2, seconds=1300)]
    assert judge(slow, 3, 1200)["checks"]["fits_budget"]["over"] == ["reference-2"]
    broken = [_row("reference", s, 0.1, 0.2, constraint={"satisfied": False}) for s in range(3)]
    assert not judge(null + broken, 3, 1200)["passed"]  # a gain that breaks the task's constraint does not count
    from rlbench.orchestration.validation import _own_score

    dbg = [_row("reference", s, 0.1, 0.2, debug={"bug": b, "diagnosed": d, "snippet_removed": True})
           for s, (b, d) in enumerate([("lr_off", True), ("kl_sign", False), ("advantage_sign", True)])]
    assert _own_score(dbg) == "diagnosed 2/3, fixed 3/3 (lr_off, kl_sign, advantage_sign)"
    from rlbench.orchestration.validation import _base_build

    assert _base_build({"base_model": {"name": "arith-s", "weights_hashes": ["88ad11524a9be9b3"]}}) == "; base arith-s 88ad1152"
    assert _base_build({"commit": "a478c1f"}) == ""  # a record made before builds were kept


def test_validation_scores_the_base_before_any_cell_starts(monkeypatch, tmp_path):
    """The first cell of a fresh installation must not pay for the base's scores: the cell-time
    check would judge that one-time cost instead of the task."""
    from rlbench.evaluation import baseline as baseline_mod
    from rlbench.orchestration import suite as suite_mod
    from rlbench.orchestration.validation import ValidationConfig, validate_task

    calls: list[str] = []
    monkeypatch.setattr(baseline_mod, "baseline", lambda task, device, engine: calls.append(f"base {device} {engine}"))
    monkeypatch.setattr(suite_mod, "run_suite", lambda spec: calls.append(f"suite {spec.tasks}") or (tmp_path, []))
    rec = validate_task("arith-grpo", ValidationConfig(write=False, results=str(tmp_path)))
    assert calls == ["base cpu auto", "suite ['arith-grpo']"] and rec["base_scoring_s"] >= 0


def test_batch_rewards_go_through_the_grading_server(tmp_path, monkeypatch):
    from rlbench.grading.server import GradingServer
    from rlbench.rewards.source import RewardUnavailable, batch_rewards
    from rlbench.tasks.spec import TaskConfig

    task = TaskConfig()
    svc = RewardService(task, [{"id": "train-00000", "answer": "5"}], 10, tmp_path / "q.jsonl")
    server = GradingServer(tmp_path, tmp_path, tmp_path, 60, 0, lambda path: {}, rewards=svc).start()
    try:
        monkeypatch.setenv("RLBENCH_GRADER", str(server.socket_path))
        item = {"id": "train-00000", "prompt": "2+3="}
        assert batch_rewards(task, [item, item], ["5", "6"]) == [1.0, 0.0]
        assert server.status()["reward_queries_left"] == 8
        with pytest.raises(RewardUnavailable):
            batch_rewards(task, [{"id": "test-00000", "prompt": "1+1="}], ["2"])
        assert batch_rewards(task, [{"prompt": "1+1=", "answer": "2"}], ["2"]) == [1.0]  # answers: computed locally
    finally:
        server.close()


def _long_task(max_new_tokens: int):
    """An endpoint task with GSM8K-style answers (whole solutions ending `#### N`) and completions
    of up to `max_new_tokens`."""
    from rlbench.tasks.spec import TaskConfig

    task = TaskConfig()
    task.reward.name = "exact_number"
    task.reward.params = {"extract": "gsm8k", "answer_extract": "gsm8k"}
    task.eval.max_new_tokens = max_new_tokens
    return task


def _solution(chars: int, answer: int, step: str = "She buys 12 + 30 = <<12+30=42>>42 apples, eats 7: <<42-7=35>>35.\n") -> str:
    """A completion of exactly `chars` characters whose final answer comes last, as GSM8K's do."""
    end = f"#### {answer}"
    return (step * (chars // len(step) + 1))[:chars - len(end)] + end


def test_the_reward_caps_follow_the_task():
    from rlbench.rewards.sizes import MAX_COMPLETION_CHARS, MAX_REQUEST_BYTES, completion_chars, request_bytes

    small = _long_task(8)  # the generated tasks: today's cut, a floor; a line that holds a full request of them
    assert (completion_chars(small), request_bytes(small)) == (1000, 1024 * (1000 + 64) + 4096)
    real = _long_task(1024)
    assert completion_chars(real) == 8 * 1024 and 256 * 4000 < request_bytes(real) <= 16 * 1024 ** 2
    huge = _long_task(10 ** 9)  # whatever a task says, every size stays capped
    assert (completion_chars(huge), request_bytes(huge)) == (MAX_COMPLETION_CHARS, MAX_REQUEST_BYTES)
    assert 12 * MAX_COMPLETION_CHARS < MAX_REQUEST_BYTES  # one completion always fits, however it escapes


def test_long_completions_are_scored_whole_through_the_grading_server(tmp_path, monkeypatch):
    """256 completions of 4,000 characters with the answer at the end: one request of ~1 MB (over
    the old 64 KiB line), each completion scored whole (the old 1,000-character cut lost the answer)."""
    from rlbench.grading.client import request
    from rlbench.grading.server import GradingServer
    from rlbench.rewards.source import batch_rewards

    train = [{"id": f"train-{i:05d}", "answer": f"He has {i} + 1 = <<{i}+1={i + 1}>>{i + 1}.\n#### {i + 1}"}
             for i in range(256)]
    items = [{"id": it["id"], "prompt": "How many?"} for it in train]
    texts = [_solution(4000, i + 1 if i % 2 == 0 else i + 2) for i in range(256)]
    want = [1.0 if i % 2 == 0 else 0.0 for i in range(256)]
    assert {len(t) for t in texts} == {4000}
    for tokens, cut_off in ((1024, False), (8, True)):
        folder = tmp_path / str(tokens)
        folder.mkdir()
        task = _long_task(tokens)
        svc = RewardService(task, train, 10_000, folder / "q.jsonl")
        server = GradingServer(folder, folder, folder, 60, 0, lambda path: {}, rewards=svc).start()
        try:
            monkeypatch.setenv("RLBENCH_GRADER", str(server.socket_path))
            got = batch_rewards(task, items, texts)
            logged = [json.loads(line) for line in (folder / "q.jsonl").read_text().splitlines()]
            if cut_off:  # a short task keeps today's cut: 1,000 characters each, the answers lost
                assert got == [0.0] * 256 and svc.requests == 1
                assert {len(c) for r in logged for c in r["completions"]} == {1000}
                continue
            assert got == want and svc.requests == 1
            assert logged[0]["completions"] == texts
            # text that escapes long in JSON (12 bytes a character) is packed into more requests
            wide = [_solution(4000, i + 1, step="\U0001F34E" * 60 + "\n") for i in range(256)]
            assert batch_rewards(task, items, wide) == [1.0] * 256 and svc.requests == 3
            # a line over the task's cap is refused whole, with a reason, and the server lives on
            over = request(str(server.socket_path), {"op": "reward", "ids": ["train-00000"],
                                                     "completions": ["7" * svc.max_request_bytes]}, timeout=30)
            assert not over["ok"] and "over" in over["error"] and svc.used == 512
            assert server.status()["reward_queries_left"] == 10_000 - 512
        finally:
            server.close()


def test_octal_adapt_items_are_sums_written_in_base_8(monkeypatch):
    from rlbench.data.generators.arith import generate as arith, to_base
    from rlbench.tasks.registry import load_task

    assert [to_base(n, 8) for n in (0, 7, 8, 63, 126)] == ["0", "7", "10", "77", "176"]
    assert to_base(80, 10) == "80"
    rng = random.Random(0)
    params = {"max_operand": 63, "number_base": 8}
    for family in ("main", "heldout"):
        for _ in range(500):
            it = arith(family, rng, params)
            a, b = it["prompt"].rstrip("=").split("+")
            assert set(a + b + it["answer"]) <= set("01234567")
            assert int(it["answer"], 8) == int(a, 8) + int(b, 8) and max(int(a, 8), int(b, 8)) <= 63
            assert (int(a, 8) >= int(b, 8)) == (family == "main")
    with pytest.raises(ValueError, match="number_base"):
        arith("main", rng, {"number_base": 11})
    # decimal stays what it was: the same draws give the same items as before the parameter existed
    assert arith("main", random.Random(5), {}) == {"prompt": "79+32=", "answer": "111", "family": "main"}
    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    task = load_task("octal-adapt")
    assert (task.category.value, task.model.base, task.data.sizes.train) == ("specialization", "arith-s", 256)


def test_validation_rows_keep_the_greedy_gain_and_the_table_shows_it():
    from rlbench.orchestration.validation import _cell_row, table_markdown
    from rlbench.results import CellResult, CellStatus, Gain
    from rlbench.tasks.registry import load_task

    greedy = Gain(abs=0.30, ci_low=0.25, ci_high=0.35, significant=True)
    test = Gain(abs=0.50, ci_low=0.45, ci_high=0.55, significant=True, win_rate=0.8, greedy=greedy)
    held = Gain(abs=0.20, ci_low=0.15, ci_high=0.25, significant=True)
    cells = [CellResult(cell=f"reference-arith-grpo-s{s}", agent="reference", task="arith-grpo", seed=s,
                        status=CellStatus.OK, gains={"test": test, "heldout": held}) for s in range(3)]
    rows = [_cell_row(c) for c in cells]
    assert rows[0]["greedy_gain"] == pytest.approx(0.30) and rows[0]["greedy_ci"] == pytest.approx([0.25, 0.35])
    task = load_task("arith-grpo")
    record = {"version": task.version, "cells": rows, "passed": True, "validated": "2026-12-07T00:00:00Z",
              "commit": "abc1234", "checks": {"fits_budget": {"ok": True, "longest_s": 300.0}}}
    header, _, line = table_markdown([task], {"arith-grpo": record}).splitlines()
    cols = [c.strip() for c in header.strip("|").split("|")]
    values = [c.strip() for c in line.strip("|").split("|")]
    assert len(cols) == len(values)
    assert values[cols.index("reference greedy gain (test, mean)")] == "+30.0"
    assert values[cols.index("reference heldout gain (mean)")] == "+20.0"
    older = {**record, "cells": [{k: v for k, v in r.items() if not k.startswith("greedy")} for r in rows]}
    values = [c.strip() for c in table_markdown([task], {"arith-grpo": older}).splitlines()[2].strip("|").split("|")]
    assert values[cols.index("reference greedy gain (test, mean)")] == "-"  # a record made before it was kept
