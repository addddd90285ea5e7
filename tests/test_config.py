import pytest

from rlbench.config.core import ConfigError, load_config
from rlbench.tasks.registry import load_task
from rlbench.tasks.spec import TaskConfig


def test_unknown_key_names_key_and_allowed_keys():
    with pytest.raises(ConfigError) as exc:
        load_task("arith-grpo", ["eval.temprature=0.5"])
    msg = str(exc.value)
    assert "eval.temprature" in msg
    assert "temperature" in msg and "samples_per_prompt" in msg


def test_wrong_type_names_key_and_value():
    with pytest.raises(ConfigError) as exc:
        load_task("arith-grpo", ["eval.samples_per_prompt=many"])
    msg = str(exc.value)
    assert "eval.samples_per_prompt" in msg and "many" in msg and "int" in msg


def test_enum_value_lists_allowed_values():
    with pytest.raises(ConfigError) as exc:
        load_task("arith-grpo", ["difficulty=impossible"])
    msg = str(exc.value)
    assert "difficulty" in msg and "impossible" in msg
    assert "easy, medium, hard, expert" in msg


def test_range_check_in_post_init():
    with pytest.raises(ConfigError) as exc:
        load_task("arith-grpo", ["eval.top_p=1.5"])
    assert "eval.top_p" in str(exc.value) and "1.5" in str(exc.value) and "(0, 1]" in str(exc.value)


def test_override_must_be_key_value():
    with pytest.raises(ConfigError, match="key=value"):
        load_task("arith-grpo", ["eval.temperature"])


def test_missing_required_field(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text("name: x\nversion: '1'\ncategory: reasoning\ndifficulty: easy\n")
    with pytest.raises(ConfigError, match="kind"):
        load_config(TaskConfig, path)


def test_overrides_apply():
    task = load_task("arith-grpo", ["eval.temperature=0.7", "budget.max_submissions=3"])
    assert task.eval.temperature == 0.7 and task.budget.max_submissions == 3


def test_null_stays_a_name_where_the_field_is_a_string():
    from rlbench.orchestration.suite import expand, load_run_spec

    spec = load_run_spec(["agent=null", "agents=[null,reference]", "seeds=[0,2]", "sandbox=none"])
    assert spec.agent == "null" and spec.agents == ["null", "reference"]
    cells = expand(spec)
    assert [(c.agent, c.seed) for c in cells] == [("null", 0), ("null", 2), ("reference", 0), ("reference", 2)]
    assert all(c.sandbox == "none" for c in cells)
    with pytest.raises(ConfigError, match="sandbox"):
        load_run_spec(["sandbox=docker"])
