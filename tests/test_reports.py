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

pytestmark = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
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


def test_cells_are_logged_to_wandb_offline(suite):
    suite_dir, results = suite
    assert os.environ.get("WANDB_MODE") == "offline"  # the default: nothing leaves the machine
    runs = sorted((suite_dir / "wandb").glob("offline-run-*"))
    assert len(runs) == 2 and all(list(r.glob("run-*.wandb")) for r in runs), runs
    logged = b"".join(next(r.glob("run-*.wandb")).read_bytes() for r in runs)
    assert b"runs.a/reward_mean" in logged and b"capabilities/autonomy" in logged


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
