"""Answer extraction and exact numeric rewards on strings in the formats real datasets and models write."""

from __future__ import annotations

import time
from fractions import Fraction

import pytest

from conftest import write_tiny_task
from rlbench.config.core import ConfigError
from rlbench.rewards import exact_int, get_reward
from rlbench.rewards.extract import EXTRACTORS, TAIL_CHARS, boxed, extract, gsm8k, last_number, marker, parse_number
from rlbench.rewards.number import exact_number

# GSM8K's first train item's `answer` field, verbatim: the solution with its calculator annotations
GSM8K_SOLUTION = ("Natalia sold 48/2 = <<48/2=24>>24 clips in May.\n"
                  "Natalia sold 48+24 = <<48+24=72>>72 clips altogether in April and May.\n#### 72")
# a MATH-style solution: the answer boxed, with braces inside the box
MATH_SOLUTION = r"The probability is $\frac{3}{4}$, since $1 - \frac{1}{4} = \frac{3}{4}$. So $\boxed{\frac{3}{4}}$."


def test_a_gsm8k_solution_scores_against_itself():
    assert gsm8k(GSM8K_SOLUTION) == "72"
    assert exact_number(GSM8K_SOLUTION, GSM8K_SOLUTION, answer_extract="gsm8k") == 1.0
    assert exact_number(GSM8K_SOLUTION, GSM8K_SOLUTION, extract="gsm8k", answer_extract="gsm8k") == 1.0
    wrong = GSM8K_SOLUTION.replace("#### 72", "#### 71")
    assert exact_number(wrong, GSM8K_SOLUTION, extract="gsm8k", answer_extract="gsm8k") == 0.0
    # what exact_int makes of the same pair: the gold field is a whole solution, not an integer
    assert exact_int(GSM8K_SOLUTION, GSM8K_SOLUTION) == 0.0


def test_gsm8k_reads_the_line_after_the_last_marker():
    assert gsm8k("#### 72\n\nQuestion: Tom has 3 apples") == "72"  # a model that keeps writing
    assert gsm8k("Answer: #### 5\nno, wait\n####  -8  \n") == "-8"
    assert gsm8k("72") is None


@pytest.mark.parametrize("completion,answer", [
    ("The answer is $1,234.50.", "1234.5"),
    ("So she pays 3.50 dollars.", "3.5"),
    ("Total: $72", "72"),
    ("It takes 72.", "72.00"),
    ("The discount is 20%.", "20"),
    ("The change in temperature is \u22125 degrees.", "-5"),  # a typeset minus sign
])
def test_decimals_dollars_and_separators_score(completion, answer):
    assert exact_number(completion, answer) == 1.0
    assert exact_number(completion, answer, extract="marker" if "answer" in completion else "last_number") == 1.0


def test_boxed_answers():
    assert boxed(MATH_SOLUTION) == r"\frac{3}{4}"
    assert parse_number(boxed(MATH_SOLUTION)) is None  # LaTeX is not a number: compared as 0, never guessed
    assert exact_number(MATH_SOLUTION, "0.75", extract="boxed") == 0.0
    assert exact_number(r"Adding up, the answer is $\boxed{3/4}$.", "0.75", extract="boxed") == 1.0
    assert boxed(r"first \boxed{1} then \fbox{ 12 } then \boxed{7") == "12"  # the last complete box
    assert boxed(r"\boxed{\text{a}\{b\}}") == r"\text{a}\{b\}"
    assert boxed("no box here {1}") is None


def test_the_last_number_is_the_answer_without_a_marker():
    assert last_number("I think 3, no wait, 5") == "5"
    assert exact_number("I think 3, no wait, 5", "5") == 1.0
    assert exact_number("I think 3, no wait, 5", "3") == 0.0
    assert last_number(GSM8K_SOLUTION) == "72"  # the calculator annotations come before it
    assert last_number("5-3=2") == "2" and last_number("x = -3") == "-3"
    assert last_number("Python 3.10.2") is None  # not a number, and not its last piece ".2"


def test_marker_keeps_the_exact_int_convention():
    assert marker("answer: 3 ... the answer is 5, not 6") == "5"
    assert marker("12+70=82") == "12"  # no marker: the first number, as exact_int reads it
    assert marker("The answer is 2.5 hours") == "2.5"


@pytest.mark.parametrize("name", sorted(EXTRACTORS))
@pytest.mark.parametrize("completion", ["", "   \n", "I do not know.", "#### ", r"\boxed{}"])
def test_no_number_no_reward(name, completion):
    params = {"pattern": r"= (\S+)"} if name == "regex" else {}
    assert parse_number(extract(name, completion, **params)) is None
    assert exact_number(completion, "0", extract=name, **params) == 0.0


def test_regex_extractor():
    text = "Final: 3\nthinking more\nFinal: 4 apples"
    assert extract("regex", text, pattern=r"Final: (\S+)") == "4"  # the last match, its group 1
    assert extract("regex", text, pattern=r"\d+ apples") == "4 apples"  # no group: the whole match
    assert extract("regex", "nothing", pattern=r"Final: (\S+)") is None
    assert exact_number(text, "Final: 4", extract="regex", answer_extract="regex", pattern=r"Final: (\S+)") == 1.0


@pytest.mark.parametrize("text,value", [
    ("72", Fraction(72)), ("72.00", Fraction(72)), (" 72. ", Fraction(72)), ("+7", Fraction(7)), ("-5", Fraction(-5)),
    ("3.50", Fraction(7, 2)), ("1,234.5", Fraction(2469, 2)), ("1,234,567", Fraction(1234567)), (".5", Fraction(1, 2)),
    ("$72", Fraction(72)), ("-$5", Fraction(-5)), ("$-5", Fraction(-5)), (r"\$5", Fraction(5)),
    ("50%", Fraction(50)), (r"50\%", Fraction(50)), ("3/4", Fraction(3, 4)), ("-3/4", Fraction(-3, 4)),
])
def test_parse_number_reads(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize("text", ["", "1.2.3", "1,23", "12,3456", "72 apples", "3/0", "3/4/5", "1e5", r"\frac{3}{4}",
                                  "--5", "72..", "seventy-two", "9" * 5000, None])
def test_parse_number_refuses(text):
    assert parse_number(text) is None


def test_a_hostile_megabyte_is_read_quickly():
    """A completion sent to the reward endpoint can be any string: extraction reads only the end
    of it (TAIL_CHARS), and a numeral too long for an answer is none, never a ValueError."""
    junk = "x" * (1 << 20)
    early = "#### 72\n\\boxed{72} Final: 72 " + junk
    assert gsm8k(early) is None and boxed(early) is None and last_number(early) is None
    assert marker(early) == "72"  # the marker convention reads the whole text, like exact_int
    hostile = ["9" * (1 << 20), "\\boxed{" * (1 << 17), "{" * (1 << 20) + "}" * (1 << 20),
               "1," * (1 << 19), "#" * (1 << 20), "-." * (1 << 19), "answer is " * (1 << 17)]
    start = time.monotonic()
    for text in hostile:
        for name in EXTRACTORS:
            params = {"pattern": r"(\d+)\D*$"} if name == "regex" else {}
            assert exact_number(text, "72", extract=name, **params) == 0.0
    assert time.monotonic() - start < 10.0, "extraction must not grow with the completion"
    assert last_number("9" * (1 << 20)) == "9" * TAIL_CHARS  # read from the end only


def test_exact_number_is_a_registered_reward():
    assert get_reward("exact_number")(GSM8K_SOLUTION, GSM8K_SOLUTION, answer_extract="gsm8k") == 1.0


def _load(tmp_path, monkeypatch, reward):
    from rlbench.tasks.registry import load_task

    write_tiny_task(tmp_path, "real-tier", reward=reward)
    monkeypatch.setenv("RLBENCH_TASKS", str(tmp_path))
    return load_task("real-tier")


def test_reward_params_are_checked_at_task_load(tmp_path, monkeypatch):
    task = _load(tmp_path, monkeypatch, {"name": "exact_number", "params": {"extract": "boxed", "answer_extract": "gsm8k"}})
    assert task.reward.params == {"extract": "boxed", "answer_extract": "gsm8k"}
    with pytest.raises(ConfigError, match=r"reward\.params\.extract.*'nope'.*allowed: boxed, gsm8k, last_number, marker, regex"):
        _load(tmp_path, monkeypatch, {"name": "exact_number", "params": {"extract": "nope"}})
    with pytest.raises(ConfigError, match=r"reward\.params\.answer_extract.*allowed: boxed"):
        _load(tmp_path, monkeypatch, {"name": "exact_number", "params": {"answer_extract": "GSM8K"}})
    with pytest.raises(ConfigError, match=r"reward\.params\.extractor.*allowed: extract, answer_extract, pattern"):
        _load(tmp_path, monkeypatch, {"name": "exact_number", "params": {"extractor": "gsm8k"}})
    with pytest.raises(ConfigError, match=r"reward\.params\.pattern"):  # regex without a pattern
        _load(tmp_path, monkeypatch, {"name": "exact_number", "params": {"extract": "regex"}})
    with pytest.raises(ConfigError, match=r"reward\.params\.pattern.*not a regular expression"):
        _load(tmp_path, monkeypatch, {"name": "exact_number", "params": {"extract": "regex", "pattern": "(unclosed"}})
    with pytest.raises(ConfigError, match=r"reward\.params\.pattern"):  # a pattern no extractor reads
        _load(tmp_path, monkeypatch, {"name": "exact_number", "params": {"pattern": r"(\d+)"}})
    with pytest.raises(ConfigError, match=r"reward\.params\.extract.*not a param of reward 'exact_int'.*\(none\)"):
        _load(tmp_path, monkeypatch, {"name": "exact_int", "params": {"extract": "gsm8k"}})


def test_exact_int_gives_no_answer_for_a_numeral_past_int_limits():
    from rlbench.rewards.exact import exact_int, parse_int_answer

    assert parse_int_answer("the answer is " + "9" * 5000) is None  # not a ValueError from int()
    assert exact_int("9" * 5000, "9") == 0.0 and exact_int("the answer is 72", "72") == 1.0
