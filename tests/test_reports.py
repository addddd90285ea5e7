"""Run reports and the leaderboard: their content, their commands, and how they look in a browser."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import rlbench_cmd
from rlbench.sandbox import bwrap_path

# the suite fixture runs real cells in the sandbox; the hand-made cell folders below need none
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
CHROMEDRIVER = shutil.which("chromedriver")
CHROMIUM = shutil.which("chromium")
needs_browser = pytest.mark.skipif(CHROMEDRIVER is None or CHROMIUM is None,
                                   reason="chromium and chromium-driver missing: make setup installs them")


@pytest.fixture(scope="module")
def suite(tmp_path_factory, ray_cluster):
    from rlbench.orchestration.suite import load_run_spec, run_suite

    root = tmp_path_factory.mktemp("reports")
    spec = load_run_spec(["agents=[null,sweep_agents:Reporter]", "task=arith-tiny", "seeds=[0]", f"results={root}",
                          "suite=rep", "cell_cpus=1", "grace_s=10", "wandb=true"])
    suite_dir, results = run_suite(spec)
    assert [r.status for r in results] == ["ok", "ok"], results
    return suite_dir, results


@needs_bwrap
def test_cell_report_shows_what_the_agent_did(suite):
    suite_dir, results = suite
    cell = Path(results[1].cell_dir)
    assert (cell / "report.html").is_file()  # written by the suite itself
    r = json.loads((cell / "report.json").read_text())
    assert r["tools"] == {"exec": 2, "submit": 2, "write": 1}
    assert [f["tool"] for f in r["failures"]] == ["exec", "submit"]  # the refused submission is a failed call
    assert [x["next_success"] for x in r["recoveries"]] == [3, 5]
    assert [s["ok"] for s in r["submissions"]] == [False, True] and r["chosen"] == 2
    assert {"GRPO", "KL penalty"} <= set(r["methods"])
    assert any(e["file"] == "train.py" and "kl_coef" in e["text"] for e in r["methods"]["KL penalty"]["evidence"])
    run = next(t for t in r["training_runs"] if t["run"] == "runs/a")
    assert run["steps"] == 20 and run["curves"]["reward_mean"][0] == [1, pytest.approx(0.22)]
    assert len(run["curves"]["dev_greedy"]) == 4
    assert r["code"]["commits"] >= 2 and [f["file"] for f in r["code"]["files"]] == ["train.py"]
    assert r["timeline"][0]["start"] is not None and r["gains"]["test"]["abs"] == 0.0
    html = (cell / "report.html").read_text()
    assert "Plotly.newPlot" in html and 'id="timeline"' in html and "kl_coef" in html
    assert "https://" not in html.split("<body>")[1].split("<script>")[0]  # nothing to fetch: self-contained


@needs_bwrap
def test_cells_are_logged_to_wandb_offline(suite):
    suite_dir, results = suite
    assert os.environ.get("WANDB_MODE") == "offline"  # the default: nothing leaves the machine
    runs = sorted((suite_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(list(r.glob("run-*.wandb")) for r in runs), runs
    logged = b"".join(next(r.glob("run-*.wandb")).read_bytes() for r in runs)
    assert b"runs.a/reward_mean" in logged and b"capabilities/autonomy" in logged


@needs_bwrap
def test_leaderboard_files_and_commands(suite, tmp_path):
    suite_dir, results = suite
    board = json.loads((suite_dir / "leaderboard.json").read_text())
    assert sorted((r["agent"], r["seeds"]) for r in board["rows"]) == [("null", 1), ("sweep_agents:Reporter", 1)]
    assert all(r["abs_gain"] == 0.0 and r["significant"] is False for r in board["rows"])
    assert (suite_dir / "leaderboard.csv").read_text().splitlines()[0].startswith("agent,task,seeds")
    cli = subprocess.run(rlbench_cmd() + ["leaderboard", str(suite_dir), "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode == 0 and "normalized" in cli.stdout and (tmp_path / "leaderboard.html").is_file(), cli.stderr
    cli = subprocess.run(rlbench_cmd() + ["report", results[0].cell_dir, "--out", str(tmp_path)], capture_output=True,
                         text=True, timeout=300)
    assert cli.returncode == 0 and (tmp_path / "report.json").is_file(), cli.stderr
    bad = subprocess.run(rlbench_cmd() + ["report", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "not a cell folder" in bad.stderr
    bad = subprocess.run(rlbench_cmd() + ["leaderboard", str(tmp_path)], capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and "not a finished suite" in bad.stderr


@needs_bwrap
@needs_browser
def test_report_and_leaderboard_render_and_sort_in_headless_chromium(suite, tmp_path):
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By

    suite_dir, results = suite
    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for flag in ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--window-size=1300,1800"):
        options.add_argument(flag)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    try:
        driver.get((suite_dir / "leaderboard.html").as_uri())
        for plot in ("plot-gains", "plot-normalized", "plot-budget"):  # plotly drew them
            assert driver.find_elements(By.CSS_SELECTOR, f"#{plot} .main-svg"), plot
        rows = lambda: [tr.find_elements(By.TAG_NAME, "td")[0].text
                        for tr in driver.find_elements(By.CSS_SELECTOR, "#leaderboard tbody tr") if tr.is_displayed()]
        agent_header = driver.find_elements(By.CSS_SELECTOR, "#leaderboard th")[0]
        agent_header.click()
        first = rows()
        agent_header.click()
        assert rows() == list(reversed(first)) and sorted(first) == sorted(["null", "sweep_agents:Reporter"])
        driver.find_element(By.ID, "filter").send_keys("reporter")
        assert rows() == ["sweep_agents:Reporter"]
        driver.save_screenshot(str(tmp_path / "leaderboard.png"))
        driver.get((Path(results[1].cell_dir) / "report.html").as_uri())
        assert driver.find_element(By.ID, "status").text == "ok"
        for plot in ("timeline", "curve-reward_mean", "curve-kl", "submissions"):
            assert driver.find_elements(By.CSS_SELECTOR, f"#{plot} .main-svg"), plot
        assert len(driver.find_elements(By.CSS_SELECTOR, "#methods-table tr")) >= 3
        driver.save_screenshot(str(tmp_path / "report.png"))
    finally:
        driver.quit()
    for shot in ("leaderboard.png", "report.png"):
        assert (tmp_path / shot).stat().st_size > 10_000, shot


# LLM use and the transcript, from cell folders made by hand (no sandbox, no Ray) -------------------

TWO_MODELS = {"claude-sonnet-4-5": {"input_tokens": 10_000, "output_tokens": 3_000, "cached_tokens": 8_000,
                                    "requests": 6, "cost_usd": 0.0812},
              "claude-haiku": {"input_tokens": 500, "output_tokens": 100, "cached_tokens": 0, "requests": 1,
                               "cost_usd": None}}


def _result(agent: str, seed: int, llm_usage, **extra):
    from rlbench.results import CellResult, CellStatus, Gain

    return CellResult(cell=f"{agent}-arith-tiny-s{seed}", agent=agent, task="arith-tiny", seed=seed,
                      status=CellStatus.OK, sandboxed=True, started="2026-12-06T15:49:15Z",
                      finished="2026-12-06T15:49:39Z", cell_seconds=24.3,
                      baseline={"test": {"pass_at_1": 0.2, "greedy": 0.2}}, scores={"test": {"pass_at_1": 0.25, "greedy": 0.3}},
                      gains={"test": Gain(abs=0.05, ci_low=0.01, ci_high=0.09, significant=True)},
                      budget={"wall_seconds": 300, "used_seconds": 1.8, "tool_calls": 2}, llm_usage=llm_usage, **extra)


def _table_rows(text: str) -> dict[str, list[str]]:
    """A rich table's rows (its header's too) by their first cell, each as its stripped cells."""
    rows = {}
    for line in text.replace("┃", "│").splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if cells and cells[0]:
            rows[cells[0]] = cells
    return rows


def test_the_leaderboard_shows_tokens_and_cost_per_cell_and_their_means_per_agent(tmp_path):
    from rich.console import Console

    from rlbench.io import atomic_write_json
    from rlbench.reports.leaderboard import cell_usage, leaderboard_rows, terminal_table, write_leaderboard

    suite_dir = tmp_path / "llm-suite"
    one_model = {"claude-sonnet-4-5": {"input_tokens": 12_000, "output_tokens": 3_400, "cached_tokens": 8_000,
                                       "requests": 6, "cost_usd": 0.0912}}
    unpriced = {"scripted": {"input_tokens": 500, "output_tokens": 100, "cached_tokens": 0, "requests": 5,
                             "cost_usd": None}}
    atomic_write_json(suite_dir / "results.json", [
        _result("null", 0, None).to_json_dict(), _result("claude-code", 0, one_model).to_json_dict(),
        _result("claude-code", 1, TWO_MODELS).to_json_dict(), _result("react", 0, unpriced).to_json_dict()])

    rows, cells = leaderboard_rows(suite_dir)
    by_cell = {c["cell"]: c for c in cells}
    assert (by_cell["claude-code-arith-tiny-s0"]["tokens"], by_cell["claude-code-arith-tiny-s0"]["cost_usd"]) == \
        (15_400, 0.0912)
    s1 = by_cell["claude-code-arith-tiny-s1"]  # cached tokens are part of the input: not counted twice
    assert (s1["tokens"], s1["cost_usd"], s1["cost_partial"]) == (13_600, 0.0812, True)
    assert "no price for claude-haiku" in s1["usage_note"]
    assert (by_cell["null-arith-tiny-s0"]["tokens"], by_cell["null-arith-tiny-s0"]["cost_usd"]) == (None, None)
    assert (by_cell["react-arith-tiny-s0"]["tokens"], by_cell["react-arith-tiny-s0"]["cost_usd"]) == (600, None)
    by_agent = {r["agent"]: r for r in rows}
    claude = by_agent["claude-code"]  # the mean across seeds, as every other column of the row
    assert claude["tokens"] == 14_500 and claude["cost_usd"] == pytest.approx(0.0862) and claude["cost_partial"]
    assert "mean of 2/2 seeds" in claude["usage_note"]
    assert by_agent["null"]["tokens"] is None and by_agent["null"]["cost_usd"] is None
    assert by_agent["react"]["cost_usd"] is None and "no model reported a cost" in by_agent["react"]["usage_note"]
    # result.json is a file: what is not a model's record counts for nothing, and nothing reads as $0
    assert cell_usage({"m": "not usage"})["tokens"] is None
    odd = cell_usage({"m": {"input_tokens": True, "output_tokens": -5, "cost_usd": float("nan")}})
    assert (odd["tokens"], odd["cost_usd"]) == (0, None)

    console = Console(width=300, record=True)
    console.print(terminal_table(rows, suite_dir.name))
    text = console.export_text()
    table = _table_rows(text)
    assert table["agent"][-2:] == ["tokens", "cost $"]
    assert table["claude-code"][-2:] == ["14,500", "0.0862 (partial)"]
    assert table["null"][-2:] == ["-", "-"] and table["react"][-2:] == ["600", "-"]
    assert "means across the seeds" in " ".join(text.split())

    paths = write_leaderboard(suite_dir)
    board = json.loads(paths["json"].read_text())
    assert {r["agent"]: r["tokens"] for r in board["rows"]} == {"claude-code": 14_500, "null": None, "react": 600}
    lines = paths["csv"].read_text().splitlines()
    header = lines[0].split(",")
    assert header[-3:] == ["tokens", "cost_usd", "cost_partial"]
    csv_rows = {line.split(",")[0]: line.split(",") for line in lines[1:]}
    assert csv_rows["claude-code"][-3:] == ["14500.0", "0.086200", "True"]
    assert csv_rows["null"][-3:] == ["", "", ""]  # unknown stays empty, never 0
    html = paths["html"].read_text()
    body = html.split('<table id="leaderboard">')[1].split("</tbody>")[0]
    page = {r.split("</td>")[0].rsplit(">", 1)[-1]: r for r in body.split("<tr>")[2:]}
    assert page["null"].endswith('<td class="" data-v="">-</td><td class="" data-v="">-</td></tr>\n')
    assert ">14,500</td>" in page["claude-code"] and ">0.0862 (partial)</td>" in page["claude-code"]
    assert 'title="tokens: mean of 2/2 seeds' in page["claude-code"]
    assert ">tokens</th>" in html and ">cost $</th>" in html and 'id="usage-note"' in html
    cells_table = html.split('<table id="cells">')[1].split("</table>")[0]
    assert ">0.0812 (partial)</td>" in cells_table and ">13,600</td>" in cells_table


def _reply(turn: int, text: str, calls: list[tuple[str, str, dict | str]], time: str = "2026-12-06T15:49:20Z") -> str:
    return json.dumps({"time": time, "event": "reply", "turn": turn, "message": {
        "role": "assistant", "content": text, "tool_calls": [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": args if isinstance(args, str)
                                                         else json.dumps(args)}} for cid, name, args in calls]},
        "tokens": {"prompt": 100 * turn, "completion": 20 * turn}})


def _cell_dir(tmp_path: Path, agent: str, llm_usage, conversation: list[str] | None, trajectory: list[dict]) -> Path:
    from rlbench.io import atomic_write_json

    cell = tmp_path / "cells" / f"{agent}-arith-tiny-s0"
    cell.mkdir(parents=True)
    atomic_write_json(cell / "result.json", _result(agent, 0, llm_usage).to_json_dict())
    if conversation is not None:
        (cell / "conversation.jsonl").write_text("\n".join(conversation) + "\n")
    (cell / "trajectory.jsonl").write_text("".join(json.dumps(s) + "\n" for s in trajectory))
    return cell


PAYLOAD = "<script>alert('owned')</script><img src=x onerror=alert(1)>"


def test_the_cell_report_interleaves_the_conversation_with_the_harness_calls_and_escapes_it(tmp_path):
    from rlbench.reports.cell_html import write_cell_report

    trajectory = [
        {"step": 1, "tool": "exec", "args": {"command": "echo hi"}, "ok": True, "seconds": 0.5,
         "time": "2026-12-06T15:49:21Z", "result": {"ok": True, "stdout": "<b>hi</b>\n", "returncode": 0}},
        {"step": 2, "tool": "submit", "args": {"path": "model"}, "ok": False, "seconds": 0.1,
         "time": "2026-12-06T15:49:23Z", "result": {"ok": False, "error": "no checkpoint </pre><script>x()</script>"}}]
    conversation = [  # react's shape: no tool results of its own, the harness's records are its results
        _reply(1, PAYLOAD, [("call_1", "exec", {"command": "echo hi\necho </pre><script>bad()</script>"})]),
        _reply(2, "Now I submit.", [("call_2", "submit", {"path": "model"})], "2026-12-06T15:49:22Z"),
        _reply(3, "", [("call_3", "exec", "{not json")], "2026-12-06T15:49:24Z"),
        json.dumps({"time": "2026-12-06T15:49:24Z", "event": "malformed_tool_call", "turn": 3, "tool": "exec",
                    "error": "Expecting property name"}),
        _reply(4, "", [("call_4", "finish", {"summary": "done"})], "2026-12-06T15:49:25Z"),
        json.dumps({"time": "2026-12-06T15:49:25Z", "event": "stop", "why": "finish"})]
    cell = _cell_dir(tmp_path, "react", TWO_MODELS, conversation, trajectory)
    html_path, json_path = write_cell_report(cell, tmp_path / "out")
    r = json.loads(json_path.read_text())
    tr = r["transcript"]
    assert (tr["present"], tr["records"], tr["skipped_lines"]) == (True, 6, 0)
    assert [e["kind"] for e in tr["entries"]] == ["reply", "reply", "reply", "reply", "event"]
    calls = [e["calls"][0] for e in tr["entries"][:4]]
    assert [(c["link"], c["step"]) for c in calls] == [("step", 1), ("step", 2), ("refused", None), ("none", None)]
    assert calls[0]["arguments"].startswith("command: echo hi\necho ")  # a command's newlines as newlines
    assert "<b>hi</b>" in calls[0]["result"] and calls[1]["ok"] is False
    assert tr["entries"][0]["text"] == PAYLOAD and tr["entries"][0]["t"] == 5.0  # kept as written; escaped in HTML
    assert r["usage"]["total"] == {"requests": 7, "input_tokens": 10_500, "cached_tokens": 8_000, "output_tokens": 3_100,
                                   "tokens": 13_600, "cost_usd": 0.0812, "unpriced": ["claude-haiku"]}

    html = html_path.read_text()
    report = html.split("<body>")[1]
    for raw in ("<script>alert", "<img src=x", "<script>bad()", "<b>hi</b>", "<script>x()"):
        assert raw not in report, raw
    assert "&lt;script&gt;alert(&#39;owned&#39;)&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;" in report
    assert "&lt;b&gt;hi&lt;/b&gt;" in report and "echo &lt;/pre&gt;&lt;script&gt;bad()" in report
    transcript = report.split('<table id="transcript-table"')[1].split("</table>")[0]
    assert '<div class="call" id="step-1">' in transcript and "harness call #2, failed" in transcript
    assert "not run: malformed_tool_call" in transcript and "no harness record of this call" in transcript
    assert '<a href="#step-2">2</a>' in report  # the failure links to its place in the transcript
    usage = report.split('<table id="usage-table">')[1].split("</table>")[0]
    assert "<code>claude-haiku</code>" in usage and "<td>13600</td>" in usage
    assert "<td>0.0812 (partial)</td>" in usage and "no price for claude-haiku" in report


def test_a_coding_agent_cli_transcript_follows_its_run_and_a_null_cell_has_the_harness_calls_only(tmp_path):
    from rlbench.reports.cell_report import build_cell_report

    trajectory = [{"step": 1, "tool": "write", "args": {"path": "PROMPT.md"}, "ok": True, "seconds": 0.0,
                   "time": "2026-12-06T15:49:16Z", "result": {"ok": True}},
                  {"step": 2, "tool": "exec", "args": {"command": "claude -p ..."}, "ok": True, "seconds": 20.0,
                   "time": "2026-12-06T15:49:37Z", "result": {"ok": True}}]
    conversation = [  # a CLI's stream, written when its run ended: its own tool results
        _reply(1, "", [("toolu_1", "bash", {"command": "ls"})], "2026-12-06T15:49:38Z"),
        json.dumps({"time": "2026-12-06T15:49:38Z", "event": "tool_result", "turn": 1, "tool_call_id": "toolu_1",
                    "content": "model\ndata\n"}),
        _reply(2, "Done.", [], "2026-12-06T15:49:38Z")]
    cli = build_cell_report(_cell_dir(tmp_path / "cli", "claude-code", TWO_MODELS, conversation, trajectory))
    entries = cli["transcript"]["entries"]
    assert [e["kind"] for e in entries] == ["step", "step", "reply", "tool_result", "reply"]
    assert [e["step"] for e in entries[:2]] == [1, 2] and entries[0]["t"] == 1.0
    assert entries[2]["calls"][0]["link"] == "" and entries[3]["tool"] == "bash" and entries[3]["text"] == "model\ndata\n"

    null = build_cell_report(_cell_dir(tmp_path / "null", "null", None, None, trajectory))
    assert null["usage"] is None and null["transcript"]["present"] is False
    assert [e["kind"] for e in null["transcript"]["entries"]] == ["step", "step"]


def test_a_malformed_oversized_or_linked_conversation_shows_what_is_readable_and_counts_the_rest(tmp_path,
                                                                                                  monkeypatch):
    from rlbench.reports import cell_report
    from rlbench.reports.cell_html import write_cell_report

    lines = [
        _reply(1, "first \udc80", [("c1", "exec", {"command": "ls"})]),  # a lone surrogate: made writable
        "{not json",  # malformed
        json.dumps(["a", "list"]),  # not an object
        "[" * 100_000,  # deeper than the JSON parser goes
        json.dumps({"event": "reply", "message": {"role": "assistant",
                                                  "content": "x" * (cell_report.TRANSCRIPT_LINE_BYTES + 1)}}),
        _reply(2, "y" * (cell_report.TEXT_CAP + 50), [("c2", "exec", {"command": "ls"})]),
        json.dumps({"event": "tool_result", "tool_call_id": "c2", "content": {"ok": True, "index": 1}}),
        json.dumps({"event": "reply", "message": {"role": "assistant", "content": "done", "tool_calls": "oops"}}),
        json.dumps({"event": "reply", "message": "not a message"}),
        json.dumps({"event": "stop", "why": "finished", "time": "not a time"}),
    ]
    cell = _cell_dir(tmp_path, "claude-code", TWO_MODELS, lines, [])
    html_path, json_path = write_cell_report(cell, tmp_path / "out")
    tr = json.loads(json_path.read_text())["transcript"]
    assert (tr["records"], tr["skipped_lines"], tr["truncated"], tr["texts_cut"]) == (6, 4, False, 1)
    kinds = [e["kind"] for e in tr["entries"]]
    assert kinds == ["reply", "reply", "tool_result", "reply", "reply", "event"]
    assert tr["entries"][0]["text"] == "first ?"
    assert tr["entries"][1]["text"] == "y" * cell_report.TEXT_CAP + " [... 50 more characters not shown]"
    assert tr["entries"][2]["text"] == '{"ok": true, "index": 1}' and tr["entries"][3]["calls"] == []
    assert tr["entries"][5]["t"] is None and tr["entries"][5]["text"] == "why: finished"
    html = html_path.read_text()
    assert "4 malformed or oversized lines skipped" in html and "more characters not shown" in html

    # capped: a file cut inside a line, a line limit, a budget for all texts together
    (cell / "conversation.jsonl").write_text("".join(_reply(n, "z" * 300, []) + "\n" for n in range(1, 51)))
    monkeypatch.setattr(cell_report, "TRANSCRIPT_BYTES", 3_000)
    tr = cell_report.build_cell_report(cell)["transcript"]
    assert tr["truncated"] and tr["skipped_lines"] == 1 and 0 < tr["records"] < 50
    monkeypatch.setattr(cell_report, "TRANSCRIPT_BYTES", 1 << 20)
    monkeypatch.setattr(cell_report, "TRANSCRIPT_LINES", 5)
    assert cell_report.build_cell_report(cell)["transcript"]["records"] == 5
    monkeypatch.setattr(cell_report, "TRANSCRIPT_LINES", 1000)
    monkeypatch.setattr(cell_report, "TRANSCRIPT_TEXT_BUDGET", 1_000)
    entries = cell_report.build_cell_report(cell)["transcript"]["entries"]
    assert entries[0]["text"] == "z" * 300 and "budget for the transcript is spent" in entries[4]["text"]
    assert entries[-1]["text"].startswith(" [... 300 more characters not shown")

    # a link is never followed: the report reads as if there were no conversation
    secret = tmp_path / "secret.jsonl"
    secret.write_text(_reply(1, "TOP-SECRET", []) + "\n")
    (cell / "conversation.jsonl").unlink()
    (cell / "conversation.jsonl").symlink_to(secret)
    html_path, json_path = write_cell_report(cell, tmp_path / "linked")
    assert json.loads(json_path.read_text())["transcript"]["present"] is False
    assert "TOP-SECRET" not in html_path.read_text()
