"""Hidden splits no agent can rebuild (issue 21, hole 3): secret split seeds per installation, the
base model's zoo record kept out of the workspace, and an endpoint task's generator hidden from
the sandbox. The session runs on public splits (tests/conftest.py); these tests delete that
setting where they check the secret default."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest
import yaml

from conftest import REPO
from rlbench.sandbox import Sandbox, SandboxConfig, bwrap_path

TINY = "arith-tiny"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
# arith-tiny's fingerprints from its public seed, as main drew them before splits had a secret
# (computed on a2d9f32): the public mode must keep drawing exactly these
HISTORICAL = {"train": "7bcd60e1a72f218f", "dev": "d7130926d3eef2aa", "test": "0fde9192f44822f5",
              "heldout": "99f2538f6bcc5cc9"}
# what the public tasks/arith-grpo/task.yaml (which arith-tiny copies) says: any agent can read it
PUBLIC_GUESS = {"generator": "arith", "params": {"max_operand": 99}, "seed": 0}


def _prints(home: Path | None, monkeypatch) -> dict[str, str]:
    from rlbench.data.splits import fingerprint, generate_splits
    from rlbench.tasks.registry import load_task, task_dir

    if home is not None:
        monkeypatch.setenv("RLBENCH_HOME", str(home))
    splits = generate_splits(load_task(TINY), task_dir(TINY))
    return {s: fingerprint(items)[:16] for s, items in splits.items()}


def test_secret_splits_are_per_installation_and_public_ones_are_the_historical_ones(tmp_path, monkeypatch):
    from rlbench.config.core import ConfigError
    from rlbench.data.splits import data_key, prepare_data, seed_source, split_path
    from rlbench.tasks.registry import load_task, task_dir
    from rlbench.tasks.spec import DataSource

    public = _prints(None, monkeypatch)
    assert public == HISTORICAL  # the public mode did not change
    task = load_task(TINY)
    public_dir, public_key = split_path(task, "test"), data_key(task)

    monkeypatch.delenv("RLBENCH_SPLIT_SEED")  # the default
    a = _prints(tmp_path / "install-a", monkeypatch)
    assert a == _prints(tmp_path / "install-a", monkeypatch)  # the same installation: the same splits
    secret_file = tmp_path / "install-a" / "hidden" / "secrets" / "splits.secret"
    assert stat.S_IMODE(secret_file.stat().st_mode) == 0o600
    b = _prints(tmp_path / "install-b", monkeypatch)
    for split in HISTORICAL:  # all four: a public train would show which prompts the real train skipped
        assert len({public[split], a[split], b[split]}) == 3, split

    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path / "install-a"))
    data = prepare_data(task, task_dir(TINY))
    assert data.record() == {"seed_source": "secret", "fingerprints": a}
    assert data_key(task) != public_key and data_key(task).endswith("-secret") and public_key.endswith("-public")
    assert split_path(task, "test").parent.name != public_dir.parent.name  # never one stored folder for both
    # a wave still draws apart from the (secret) standard splits
    waved = prepare_data(load_task(TINY, ["data.wave=secret-wave"]), task_dir(TINY))
    seen = {it["prompt"] for items in data.splits.values() for it in items}
    assert waved.splits["train"] == data.splits["train"] and waved.seed_source == "secret"
    assert not seen & {it["prompt"] for s in ("test", "heldout") for it in waved.splits[s]}

    hf = load_task(TINY)
    hf.data.source = DataSource.hf
    assert seed_source(hf) == "public"  # a fixed dataset's splits are its own
    monkeypatch.setenv("RLBENCH_SPLIT_SEED", "hidden")
    with pytest.raises(ConfigError, match="RLBENCH_SPLIT_SEED.*allowed: secret, public"):
        prepare_data(task, task_dir(TINY))


def test_workspace_holds_no_zoo_record_of_the_base_model(tmp_path):
    from rlbench.data.splits import prepare_data
    from rlbench.harness.workspace import build_workspace
    from rlbench.models.zoo import META_FILE, resolve_model
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task(TINY)
    data = prepare_data(task, task_dir(TINY))
    base = Path(resolve_model(task.model.base).location)
    assert (base / META_FILE).is_file()  # the zoo's record names its corpus generator, params and seed
    ws = build_workspace(tmp_path / "ws", task, task_dir(TINY), base, data.splits["train"], data.splits["dev"]).root
    assert (ws / "model" / "config.json").is_file() and not (ws / "model" / META_FILE).exists()
    assert not list(ws.rglob(META_FILE))


@needs_bwrap
def test_endpoint_task_sandbox_hides_its_generator_and_keeps_what_the_pipelines_import(tmp_path, monkeypatch):
    import os
    import subprocess
    import sys

    import rlbench.data.generators.words as words
    from rlbench.features.reward_endpoint import answer_code
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    task = load_task("format-if")  # the repo's endpoint task: words.apply labels any of its prompts
    assert task.reward.access.value == "endpoint"
    assert answer_code(task) == [str(Path(words.__file__).resolve())]
    subprocess.run([sys.executable, "-c", "import py_compile, rlbench.data.generators.words as w; "
                    "py_compile.compile(w.__file__)"], check=True)  # a .pyc beside it holds every string too
    ws = tmp_path / "ws"
    ws.mkdir()
    if os.geteuid() == 0:
        os.chown(ws, 65534, 65534)
    sb = Sandbox(ws, SandboxConfig(hide=answer_code(task)), cell_budget_s=120)
    r = sb.run("python -c 'import rlbench.data.generators.words' 2>&1 | tail -1; "
               "python -c 'from rlbench.data.generators import resolve_generator; resolve_generator(\"words\")' "
               f"2>&1 | tail -1; cat {words.__file__} 2>/dev/null | wc -c", timeout=90)
    lines = r.stdout.splitlines()
    assert len(lines) == 3 and "No module named 'rlbench.data.generators.words'" in lines[0], r.stdout
    assert "key 'data.generator': cannot import" in lines[1] and lines[2].strip() == "0", r.stdout
    # what the SDK, the reward endpoint client and the reference pipelines import still loads
    r = sb.run("python -c 'from rlbench import sdk; import rlbench.rewards, rlbench.rewards.source, "
               "rlbench.data.splits, rlbench.envs, reference_pipelines.common, reference_pipelines.grpo.train, "
               "reference_pipelines.ppo.train, reference_pipelines.sft.train, reference_pipelines.dpo.train; "
               "print(\"imports ok\")'", timeout=90)
    assert r.ok and "imports ok" in r.stdout, r.stderr


# cells ---------------------------------------------------------------------------------------
@needs_bwrap
@pytest.mark.slow
def test_agent_cannot_rebuild_the_hidden_splits_from_inside_its_sandbox(tmp_path, ray_cluster, monkeypatch):
    from rlbench.data.splits import prepare_data
    from rlbench.harness.cell import CellConfig, run_cell
    from rlbench.paths import hidden_root
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task(TINY)
    assert (task.data.generator, dict(task.data.params), task.data.seed) == tuple(PUBLIC_GUESS.values())
    public = prepare_data(task, task_dir(TINY)).fingerprints  # what a rebuild from the public seed gives
    monkeypatch.delenv("RLBENCH_SPLIT_SEED")  # the default: this installation's secret splits
    secret_file = hidden_root() / "secrets" / "splits.secret"
    r = run_cell(CellConfig(agent="hostile_agents:SplitRebuilder", task=TINY, seed=0, results=str(tmp_path / "results"),
                            grace_s=10, agent_options={"guess": PUBLIC_GUESS, "secret_file": str(secret_file)}))
    assert r.status == "ok", r
    rebuilt = json.loads((Path(r.cell_dir) / "workspace" / "rebuilt.json").read_text())
    hidden = prepare_data(task, task_dir(TINY))  # harness side: the splits the cell was scored on
    assert r.splits == hidden.record() and r.splits["seed_source"] == "secret"
    for split in ("test", "heldout"):
        assert rebuilt["fingerprints"][split] == public[split]  # the rebuild itself was right...
        assert rebuilt["fingerprints"][split] != hidden.fingerprints[split]  # ...and useless
    assert rebuilt["secret"].startswith("unreadable") and secret_file.read_text().strip() not in json.dumps(rebuilt)
    assert rebuilt["model_meta"] is False  # no zoo record in the workspace either


@needs_bwrap
@pytest.mark.slow
def test_reference_agent_trains_on_an_endpoint_task_whose_generator_the_sandbox_hides(tmp_path, ray_cluster,
                                                                                      monkeypatch):
    """The reference agent still works when the cell hides the generator (here arith, on an
    endpoint copy of the tiny task), and the hide list is the cell's own."""
    import rlbench.data.generators.arith as arith
    from conftest import write_tiny_task
    from rlbench.harness.cell import CellConfig, run_cell

    monkeypatch.setenv("RLBENCH_TASKS", str(tmp_path / "tasks"))  # not the session's tasks folder
    spec = yaml.safe_load((REPO / "tasks" / "arith-grpo" / "task.yaml").read_text())
    write_tiny_task(tmp_path / "tasks", "arith-tiny-endpoint", reward={"name": "exact_int", "access": "endpoint"},
                    budget={**spec["budget"], "reward_queries": 2000, "max_sweeps": 0})
    attempts = [{"steps": 3, "batch_prompts": 4, "group_size": 4, "eval_every": 0}]
    r = run_cell(CellConfig(agent="reference", task="arith-tiny-endpoint", seed=0, results=str(tmp_path / "results"),
                            grace_s=10, agent_options={"attempts": attempts, "reserve_s": 5, "base_first": False}))
    assert r.status == "ok" and r.sandboxed, r
    assert str(Path(arith.__file__).resolve()) in r.config["limits"]["hide"]
    assert r.submissions["chosen"] == 1 and r.reward_queries["used"] > 0, r.reward_queries
