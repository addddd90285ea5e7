import pytest

from rlbench.config.core import ConfigError
from rlbench.tasks.registry import list_tasks, load_task
from rlbench.tasks.spec import Category, Difficulty, WorkKind


def test_arith_grpo_loads_with_all_fields():
    t = load_task("arith-grpo")
    assert t.category == Category.reasoning
    assert t.difficulty == Difficulty.medium
    assert t.kind == WorkKind.implement
    assert t.model.base == "arith-s" and t.model.scale == "arith-m"
    assert t.data.generator == "arith"
    assert t.reward.name == "exact_int"
    assert t.eval.samples_per_prompt >= 1 and t.budget.wall_seconds > 0 and t.budget.max_submissions >= 1


def test_unknown_task_lists_known_tasks():
    with pytest.raises(ConfigError) as exc:
        load_task("no-such-task")
    assert "arith-grpo" in str(exc.value)


def test_list_tasks_includes_repo_task():
    assert "arith-grpo" in [t.name for t in list_tasks()]


def test_folder_name_must_match(session_tasks):
    folder = session_tasks / "renamed"
    folder.mkdir(exist_ok=True)
    (folder / "task.yaml").write_text((session_tasks / "arith-grpo" / "task.yaml").read_text())
    (folder / "description.md").write_text("x")
    try:
        with pytest.raises(ConfigError, match="folder name"):
            load_task("renamed")
    finally:
        import shutil

        shutil.rmtree(folder)
