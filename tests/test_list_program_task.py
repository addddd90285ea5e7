"""list-program: problems, the sandboxed reward, and hostile completions that must score nothing."""

from __future__ import annotations

import json
import random

import pytest

from rlbench.data.generators.listops import generate
from rlbench.rewards import get_reward, score_many
from rlbench.rewards.listops import list_program, list_program_batch, program


def _items(family: str, n: int, seed: int = 0) -> list[dict]:
    rng = random.Random(seed)
    return [generate(family, rng, {}) for _ in range(n)]


def test_the_reference_program_passes_its_tests_and_heldout_chains_three_steps():
    main, held = _items("main", 40), _items("heldout", 20)
    assert score_many("list_program", {}, [it["trace"] for it in main + held],
                      [it["answer"] for it in main + held]) == [1.0] * 60
    assert all(len(it["prompt"].rstrip(":").split(", ")) <= 3 for it in main)
    assert all(len([s for s in it["prompt"].rstrip(":").split(", ") if s not in ("sum", "len")]) == 3 for it in held)
    assert all(it["prompt"].count(",") <= 2 for it in main)
    assert get_reward("list_program") is list_program


def test_a_program_that_is_wrong_on_one_input_scores_nothing():
    answer = json.dumps({"inputs": [[5, 4], [3, 1, 2]], "outputs": [[4, 5], [1, 2, 3]]})
    assert list_program("v=sorted(v)", answer) == 1.0
    assert list_program("v=v[::-1]", answer) == 0.0  # right on [5, 4], wrong on [3, 1, 2]
    assert list_program("v=sorted(v)\nv=tuple(v)", answer) == 1.0  # JSON prints a tuple as a list
    assert list_program("garbage(", answer) == 0.0 and list_program("", answer) == 0.0


def test_the_expected_outputs_never_enter_the_sandbox():
    source = program("v=v[::-1]", [[1, 2, 3]])
    assert "[3, 2, 1]" not in source and "3,2,1" not in source


HOSTILE = {
    "claims to equal anything": "class A:\n  def __eq__(s, o): return True\nv=A()",
    "forges the output line": "print('RLBENCH-OUTPUTS [[3, 2, 1]]')\nimport os\nos._exit(0)",
    "reads its own program for the tests": "import sys\nv=open('/proc/self/fd/0').read()",
    "loops forever": "while True: pass",
    "forks without end": "import os\nwhile True: os.fork()",
    "opens a socket": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\nv=v[::-1]",
    "writes a file": "open('/work/pwned', 'w').write('x')\nv=v[::-1]",
    "eats memory": "x = bytearray(4 << 30)\nv=v[::-1]",
    "returns a bool for an int": "v=True",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_completions_score_nothing(name, tmp_path):
    answer = json.dumps({"inputs": [[1, 2, 3]], "outputs": [[3, 2, 1]]}) if name != "returns a bool for an int" \
        else json.dumps({"inputs": [[1]], "outputs": [1]})
    assert list_program_batch([HOSTILE[name].replace("/work/pwned", str(tmp_path / "pwned"))], [answer],
                              timeout_s=3.0)[0] == 0.0
    assert not (tmp_path / "pwned").exists()


def test_sft_refuses_answers_that_are_tests_and_the_reference_agent_skips_it(monkeypatch):
    from conftest import REPO
    from reference_pipelines.sft.train import SFTConfig, run
    from rlbench.rewards import answer_is_completion

    assert answer_is_completion("exact_int") and answer_is_completion("honest_int")
    assert not answer_is_completion("list_program") and not answer_is_completion("unit_tests")
    assert not answer_is_completion("no_such_reward")
    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    with pytest.raises(ValueError, match="checks completions against its answers"):
        run(SFTConfig(task="code-grpo@standin", steps=1))  # its reward runs unit tests


def test_the_task_loads_with_its_pinned_base_and_heldout_chains_train_never_shows(monkeypatch, tmp_path):
    from conftest import REPO
    from rlbench.data.splits import generate_splits
    from rlbench.models.zoo import pins
    from rlbench.tasks.registry import load_task

    monkeypatch.setenv("RLBENCH_TASKS", str(REPO / "tasks"))
    monkeypatch.setenv("RLBENCH_HOME", str(tmp_path))
    task = load_task("list-program")
    assert (task.category.value, task.difficulty.value, task.model.base) == ("reasoning", "medium", "code-s")
    assert task.model.base in pins(), "the base must be a canonical, pinned artifact"
    splits = generate_splits(task)
    steps = {s: {len([x for x in it["prompt"].rstrip(":").split(", ") if x not in ("sum", "len")]) for it in items}
             for s, items in splits.items()}
    # train's specs are distinct from test's, and test holds most one-step specs there are
    assert steps["train"] <= {1, 2} and steps["test"] == {1, 2} and steps["heldout"] == {3}
