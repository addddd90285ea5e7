"""Every test runs against its own RLBENCH_HOME and a tasks folder holding a tiny test task, so
tests neither read nor pollute a user's cache and never depend on a warm one."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
import yaml

# huggingface_hub reads these once, when it is first imported (during collection): set them before,
# or every hub lookup retries the network for most of a minute
os.environ["HF_HUB_OFFLINE"] = "1"
os.environ["HF_DATASETS_OFFLINE"] = "1"

REPO = Path(__file__).resolve().parent.parent
TESTS = Path(__file__).resolve().parent
TINY_TASK = "arith-tiny"


def write_tiny_task(tasks_root: Path, name: str = TINY_TASK, **changes) -> Path:
    """A copy of arith-grpo on the tiny zoo model with small splits: seconds, not minutes."""
    spec = yaml.safe_load((REPO / "tasks" / "arith-grpo" / "task.yaml").read_text())
    spec["name"] = name
    spec["model"] = {"base": "arith-tiny", "scale": None}
    spec["data"]["sizes"] = {"train": 200, "dev": 50, "test": 120, "heldout": 80}
    spec["eval"]["max_ci_halfwidth"] = 0.5
    for key, value in changes.items():
        spec[key] = value
    folder = tasks_root / name
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "task.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    (folder / "description.md").write_text(f"# {name}\nA tiny task for tests.\n")
    return folder


@pytest.fixture(scope="session")
def session_home(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("rlbench_home")


@pytest.fixture(scope="session")
def session_tasks(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("tasks")
    shutil.copytree(REPO / "tasks" / "arith-grpo", root / "arith-grpo")
    write_tiny_task(root)
    return root


@pytest.fixture(autouse=True)
def isolated_env(monkeypatch, session_home, session_tasks):
    monkeypatch.setenv("RLBENCH_HOME", str(session_home))
    monkeypatch.setenv("RLBENCH_TASKS", str(session_tasks))
    monkeypatch.delenv("RLBENCH_HIDDEN_HOME", raising=False)
    monkeypatch.setenv("RLBENCH_QUIET", "1")
    # splits from the tasks' public seeds, so the numbers tests check stay the same on every
    # machine; tests/test_security_splits.py deletes it to test the secret default
    monkeypatch.setenv("RLBENCH_SPLIT_SEED", "public")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    yield


@pytest.fixture
def fresh_home(tmp_path, monkeypatch) -> Path:
    home = tmp_path / "home"
    monkeypatch.setenv("RLBENCH_HOME", str(home))
    return home


def rlbench_cmd() -> list[str]:
    exe = Path(os.sys.executable).parent / "rlbench"
    return [str(exe)]


@pytest.fixture(scope="module")
def ray_cluster(session_home, session_tasks):
    """One embedded Ray for the module; its workers can import tests/hostile_agents.py."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    old = {k: os.environ.get(k) for k in ("PYTHONPATH", "RLBENCH_HOME", "RLBENCH_TASKS", "RLBENCH_QUIET",
                                          "RLBENCH_SPLIT_SEED")}
    os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(TESTS), old["PYTHONPATH"]) if p)
    os.environ.update(RLBENCH_HOME=str(session_home), RLBENCH_TASKS=str(session_tasks), RLBENCH_QUIET="1",
                      RLBENCH_SPLIT_SEED="public")
    # address="local": a fresh Ray even where a `ray start` left /tmp/ray/ray_current_cluster (a bare
    # init joins that cluster and refuses num_cpus; CI once failed 41 tests that way)
    ray.init(address="local", num_cpus=3, include_dashboard=False, log_to_driver=False)
    yield ray
    ray.shutdown()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v


def assert_make_py_rebuilds(standin: Path, out: Path) -> None:
    """A task's committed stand-in datasets are what its `standin/make.py` builds: the same files,
    parquet tables row for row, every other file byte for byte."""
    import importlib.util

    import pyarrow.parquet as pq

    spec = importlib.util.spec_from_file_location(f"standin_make_{standin.parent.name}", standin / "make.py")
    make = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(make)
    make.main(out)
    files = sorted(p.relative_to(standin) for p in standin.rglob("*") if p.is_file() and p.name != "make.py")
    assert files == sorted(p.relative_to(out) for p in out.rglob("*") if p.is_file())
    for rel in files:
        if rel.suffix == ".parquet":
            assert pq.read_table(out / rel).to_pylist() == pq.read_table(standin / rel).to_pylist(), rel
        else:
            assert (out / rel).read_bytes() == (standin / rel).read_bytes(), rel

