import pytest

from rlbench.rewards import exact_int, get_reward
from rlbench.rewards.exact import parse_int_answer
from rlbench.config.core import ConfigError


@pytest.mark.parametrize(
    "completion,answer,expected",
    [
        ("82", "82", 1.0),
        ("  82  ", "82", 1.0),
        ("\n82\n", "82", 1.0),
        ("82<eos>", "82", 1.0),
        ("82\n12+3=15", "82", 1.0),  # the model keeps generating after its answer
        ("82.", "82", 1.0),
        ("82 is the sum", "82", 1.0),
        ("The answer is 82", "82", 1.0),
        ("Answer: 82", "82", 1.0),
        ("#### 1,234", "1234", 1.0),
        ("1,234", "1234", 1.0),
        ("-5", "-5", 1.0),
        ("+7", "7", 1.0),
        ("007", "7", 1.0),
        ("83", "82", 0.0),
        ("820", "82", 0.0),
        ("8 2", "82", 0.0),
        ("", "82", 0.0),
        ("   ", "82", 0.0),
        ("no number", "82", 0.0),
        ("12+70=82", "82", 0.0),  # the first integer is not the answer
        ("82", "not-an-int", 0.0),
    ],
)
def test_exact_int(completion, answer, expected):
    assert exact_int(completion, answer) == expected


def test_parse_returns_none_without_number():
    assert parse_int_answer("abc") is None


def test_unknown_reward_lists_allowed():
    with pytest.raises(ConfigError, match="exact_int"):
        get_reward("nope")
