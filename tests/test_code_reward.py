"""The code reward: a completion's code against its problem's unit tests, each program in a
sandbox of its own (rlbench/sandbox/program.py). Hostile completions (loops, fork bombs, writes to
the host, the network, reading the harness's files, memory and output floods) score 0 and change
nothing outside their sandbox, and never cost another program scored beside them its result."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from conftest import REPO
from rlbench.rewards import check_reward, score_many
from rlbench.rewards.code import COMPLETION_MARK, code_of, program, unit_tests
from rlbench.sandbox import bwrap_path
from rlbench.sandbox import program as prog

needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
TESTS = "assert add(2, 3) == 5\nassert add(-1, 1) == 0"
GOOD = "Here is the function:\n```python\ndef add(a, b):\n    return a + b\n```\nIt adds."


def test_the_code_is_the_first_fenced_block_or_the_whole_completion():
    assert code_of(GOOD) == "def add(a, b):\n    return a + b\n"
    assert code_of("```py\nx = 1\n```\n```python\nx = 2\n```") == "x = 1\n"
    assert code_of("```Python3\nx = 1\n```") == "x = 1\n"
    assert code_of("```\nx = 1\n```") == "x = 1\n"
    assert code_of("sure:\n```python\ndef f():\n    return 1") == "def f():\n    return 1"  # cut at the token limit
    assert code_of("def f():\n    return 1\n") == "def f():\n    return 1\n"


def test_the_program_puts_an_answers_preamble_before_the_code_and_its_tests_after():
    assert program(GOOD, TESTS).index("def add") < program(GOOD, TESTS).index("assert add")
    answer = f"from typing import List\ndef f(x: List[int]) -> int:\n    pass\n{COMPLETION_MARK}\nassert f([1]) == 1\n"
    src = program("```python\ndef f(x: List[int]) -> int:\n    return x[0]\n```", answer)
    assert src.index("pass") < src.index("return x[0]") < src.index("assert f([1])")
    assert COMPLETION_MARK not in src.split("return x[0]")[1]


def test_reward_params_are_checked_when_the_task_loads():
    from rlbench.config.core import ConfigError

    check_reward("unit_tests", {"timeout_s": 5, "memory_mb": 512})
    for bad in ({"timeout_s": 0}, {"timeout_s": 600}, {"memory_mb": 10}, {"memory_mb": "1G"}, {"cpus": 2}):
        with pytest.raises(ConfigError):
            check_reward("unit_tests", bad)


@needs_bwrap
def test_correct_wrong_and_crashing_completions():
    assert unit_tests(GOOD, TESTS) == 1.0
    assert unit_tests("```python\ndef add(a, b):\n    return a - b\n```", TESTS) == 0.0  # wrong
    assert unit_tests("```python\ndef add(a, b):\n    raise ValueError\n```", TESTS) == 0.0  # crashes
    assert unit_tests("```python\ndef add(a, b) return a + b\n```", TESTS) == 0.0  # does not parse
    assert unit_tests("```python\nimport sys\nsys.exit(0)\n```", TESTS) == 1.0  # exits 0 before the tests: MBPP's own convention
    assert unit_tests("I cannot write code.", TESTS) == 0.0


HOSTILE = {
    "loop": "while True:\n    pass",
    "sleep": "import time\ntime.sleep(60)",
    "fork bomb": "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
    "memory": "x = bytearray(8 * 1024 ** 3)",
    "disk": "open('/tmp/big', 'wb').write(b'x' * (200 * 1024 ** 2))",
    "output flood": "import sys\nwhile True:\n    sys.stdout.write('x' * 65536)",
    "network": "import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=2)",
    "daemon": "import os, time\nif os.fork() == 0:\n    os.setsid()\n    time.sleep(60)\nraise SystemExit(1)",
}


@needs_bwrap
@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_completions_score_zero_within_their_limits(name):
    limits = prog.ProgramLimits(timeout_s=3)
    r = prog.run_python(f"{HOSTILE[name]}\n{TESTS}", limits)
    assert not r.passed and r.seconds < 20, r
    assert len(r.stdout) <= limits.output_bytes and len(r.stderr) <= limits.output_bytes


def _python_under_tmp() -> list[str]:
    """The private /tmp starts empty but for the way to a Python install that itself lies under /tmp
    (a clean clone's .venv in CI), bound read-only so the program can run."""
    import sys

    tops = {Path(p).resolve().parts[2] for p in (sys.prefix, sys.base_prefix)
            if Path(p).resolve().parts[1:2] == ("tmp",)}
    return sorted(tops)


@needs_bwrap
def test_a_program_sees_nothing_of_the_host_and_writes_nothing_there(tmp_path):
    secret = tmp_path / "hidden_split.jsonl"
    secret.write_text("the answers")
    target = tmp_path / "forged.json"
    src = (f"import os\nfor p in [{str(secret)!r}, '/root/.bashrc', {str(REPO / 'tasks')!r}]:\n"
           "    assert not os.path.exists(p), p\n"
           f"try:\n    open({str(target)!r}, 'w').write('x')\nexcept OSError:\n    pass\n"
           "assert set(os.environ) <= {'PATH', 'HOME', 'LANG', 'PYTHONDONTWRITEBYTECODE', 'OMP_NUM_THREADS', 'PWD'}, os.environ\n"
           f"assert os.getcwd() == '/tmp' and sorted(os.listdir('/tmp')) == {_python_under_tmp()!r}, os.listdir('/tmp')\n")
    r = prog.run_python(src)
    assert r.passed, r.stderr
    assert not target.exists()
    if os.geteuid() == 0:  # as root: an unprivileged uid of the program's own slot
        who = prog.run_python("import os\nprint(os.getuid(), os.getgid())")
        uid, gid = map(int, who.stdout.split())
        assert prog.SLOT_UID_BASE <= uid < prog.SLOT_UID_BASE + prog.SLOTS and gid == uid


@needs_bwrap
def test_a_fork_bomb_costs_the_programs_beside_it_nothing():
    """RLIMIT_NPROC counts a uid's processes: as root each program has a slot uid of its own, so
    the bomb fills its own quota and the correct programs scored beside it still pass."""
    bomb = "```python\nimport os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n```"
    texts = [GOOD, bomb, GOOD, bomb, GOOD, GOOD]
    assert score_many("unit_tests", {"timeout_s": 3}, texts, [TESTS] * len(texts)) == [1, 0, 1, 0, 1, 1]


def test_without_bubblewrap_root_runs_no_program_and_a_user_runs_it_under_rlimits(monkeypatch):
    monkeypatch.setattr(prog.shutil, "which", lambda _name: None)
    prog.isolation.cache_clear()
    try:
        monkeypatch.setattr(prog.os, "geteuid", lambda: 0)
        with pytest.raises(prog.SandboxUnavailable, match="never runs it outside a sandbox"):
            prog.run_python("print(1)")
        prog.isolation.cache_clear()
        monkeypatch.setattr(prog.os, "geteuid", lambda: 1000)
        assert prog.isolation() == "rlimits"
        r = prog.run_python(f"{GOOD.split('```python')[1].split('```')[0]}\n{TESTS}")
        assert r.passed and r.isolation == "rlimits"
        loop = prog.run_python("while True:\n    pass", prog.ProgramLimits(timeout_s=1))
        assert loop.timed_out and not loop.passed
    finally:
        prog.isolation.cache_clear()


def test_an_oversized_program_is_refused_before_it_runs():
    r = prog.run_python("#" * (prog.MAX_SOURCE_BYTES + 1))
    assert not r.passed and "refused" in r.stderr


@needs_bwrap
def test_every_standin_problem_is_solved_by_its_reference_and_failed_by_a_wrong_answer(monkeypatch):
    """The task's templates read the stand-ins as they read MBPP and HumanEval+: the reference
    code of every item passes the tests its answer holds, and a wrong function fails them."""
    import pyarrow.parquet as pq

    from rlbench.data.splits import load_hf_splits
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    task = load_task("code-grpo@standin")
    splits = load_hf_splits(task)
    folder = REPO / "tasks" / "code-grpo" / "standin"
    mbpp = {s: pq.read_table(folder / "mbpp" / "full" / f"{s}-00000-of-00001.parquet").to_pylist()
            for s in ("train", "validation", "test")}
    human = pq.read_table(next((folder / "humanevalplus" / "data").glob("test-*.parquet"))).to_pylist()
    pairs = [(r["code"], it) for s, name in (("train", "train"), ("dev", "validation"), ("test", "test"))
             for r, it in zip(mbpp[name], splits[s], strict=True)]
    # HumanEval+: the whole function with its signature, and no import of List: the prompt above has it
    pairs += [(f"def {r['entry_point']}(numbers: List[int]) -> int:\n{r['canonical_solution']}", it)
              for r, it in zip(human, splits["heldout"], strict=True)]
    answers = [it["answer"] for _, it in pairs]
    good = score_many(task.reward.name, task.reward.params, [f"```python\n{c}\n```" for c, _ in pairs], answers)
    wrong = score_many(task.reward.name, task.reward.params,
                       [f"```python\n{re.sub('return .*', 'return None', c)}\n```" for c, _ in pairs], answers)
    assert sum(good) == len(pairs) and sum(wrong) == 0
    first = splits["train"][0]
    assert first["prompt"].startswith(mbpp["train"][0]["text"]) and mbpp["train"][0]["test_list"][0] in first["prompt"]


@needs_bwrap
def test_the_reward_endpoint_scores_code_in_batches(tmp_path, monkeypatch):
    from rlbench.grading.rewards import RewardService
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    task = load_task("code-grpo")
    train = [{"id": f"t{i}", "answer": TESTS} for i in range(4)]
    svc = RewardService(task, train, limit=10, log_path=tmp_path / "q.jsonl")
    reply = svc.query(["t0", "t1", "t2", "t3"], [GOOD, "nothing", GOOD, "```python\nwhile True: pass\n```"])
    assert reply["ok"] and reply["rewards"] == [1.0, 0.0, 1.0, 0.0] and reply["queries_left"] == 6


def test_the_slot_folder_must_be_this_users_own(tmp_path, monkeypatch):
    monkeypatch.setattr(prog.tempfile, "gettempdir", lambda: str(tmp_path))
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / f"rlbench-program-slots-{os.geteuid()}").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(prog.SandboxUnavailable):
        with prog._slot():
            pass
    assert not list(Path(tmp_path / "elsewhere").iterdir())


def test_each_distinct_program_runs_once_and_its_result_stands_for_every_copy(monkeypatch):
    from rlbench.sandbox import program as prog

    ran: list[str] = []
    real = prog.run_python
    monkeypatch.setattr(prog, "run_python", lambda s, limits=prog.ProgramLimits(): ran.append(s) or real(s, limits))
    out = prog.run_many(["print(1)", "print(2)", "print(1)", "print(1)"], workers=2)
    assert sorted(ran) == ["print(1)", "print(2)"]
    assert [r.stdout.strip() for r in out] == ["1", "2", "1", "1"] and all(r.passed for r in out)
