"""Builds this task's stand-in datasets (run from the project root: `python tasks/code-grpo/standin/make.py`).

- `mbpp/`: a local dataset folder laid out as the hub's `google-research-datasets/mbpp` is
  (README.md with its `configs:` header, `full/{train,validation,test,prompt}-00000-of-00001.parquet`,
  columns task_id, text, code, test_list (a list of asserts), test_setup_code, challenge_test_list);
- `humanevalplus/`: the same for `evalplus/humanevalplus` (`data/test-00000-of-00001-*.parquet`;
  task_id "HumanEval/N", prompt (imports, signature and docstring), canonical_solution,
  entry_point, test: a `check(candidate)` over listed inputs and expected results).

The model is gsm8k-grpo's stand-in of Qwen/Qwen2.5-0.5B (the same base model). The problems are
templated, drawn from a fixed seed: the files are the same bytes on every run, and every item's
reference code passes its own tests (tests/test_code_reward.py runs them all).
"""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any, Callable

HERE = Path(__file__).resolve().parent

CARD = {"mbpp": "---\nconfigs:\n- config_name: full\n  data_files:\n  - split: train\n    path: full/train-*\n"
                "  - split: test\n    path: full/test-*\n  - split: validation\n    path: full/validation-*\n"
                "  - split: prompt\n    path: full/prompt-*\n---\n"
                "# mbpp stand-in (rlbench): the layout of google-research-datasets/mbpp\n",
        "humanevalplus": "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n    path: data/test-*\n---\n"
                         "# HumanEval+ stand-in (rlbench): the layout of evalplus/humanevalplus\n"}
SPLITS = {"train": 120, "validation": 30, "test": 60, "prompt": 10}

def _add(k: int, r: random.Random) -> tuple[str, Any]:
    x = r.randint(-50, 50)
    return f"({x})", x + k


def _times(k: int, r: random.Random) -> tuple[str, Any]:
    x = r.randint(-20, 20)
    return f"({x})", x * k


def _repeat(k: int, r: random.Random) -> tuple[str, Any]:
    s = r.choice(["ab", "x", "hey", "12"])
    return f"({s!r})", s * k


def _divisible(k: int, r: random.Random) -> tuple[str, Any]:
    x = r.randint(1, 200)
    return f"({x})", x % k == 0


def _sum_first(k: int, r: random.Random) -> tuple[str, Any]:
    xs = [r.randint(0, 9) for _ in range(k + 2)]
    return f"({xs!r})", sum(xs[:k])


# (text, function, reference body, a test case maker): each family takes a parameter k, so every problem is its own
FAMILIES: list[tuple[str, str, str, Callable[[int, random.Random], tuple[str, Any]]]] = [
    ("Write a function to add {k} to a given number.", "add_{k}", "return n + {k}", _add),
    ("Write a function to multiply a number by {k}.", "times_{k}", "return n * {k}", _times),
    ("Write a function to repeat a string {k} times.", "repeat_{k}", "return n * {k}", _repeat),
    ("Write a function to check whether a number is divisible by {k}.", "divisible_by_{k}", "return n % {k} == 0", _divisible),
    ("Write a function to find the sum of the first {k} elements of a list.", "sum_first_{k}", "return sum(n[:{k}])", _sum_first),
]


def mbpp_rows(rng: random.Random) -> list[dict[str, Any]]:
    rows = []
    for k in range(2, 60):
        for text, fn, body, case in FAMILIES:
            name = fn.format(k=k)
            tests = [f"assert {name}{args} == {want!r}" for args, want in (case(k, rng) for _ in range(3))]
            rows.append({"text": text.format(k=k), "code": f"def {name}(n):\n    {body.format(k=k)}",
                         "test_list": tests, "test_setup_code": "", "challenge_test_list": []})
    rng.shuffle(rows)
    return rows[:sum(SPLITS.values())]


def humaneval_row(i: int, k: int, rng: random.Random) -> dict[str, Any]:
    name = f"count_above_{k}"
    prompt = (f"from typing import List\n\n\ndef {name}(numbers: List[int]) -> int:\n"
              f'    """ Count the numbers in the list that are greater than {k}.\n'
              f"    >>> {name}([{k - 1}, {k + 1}, {k + 5}])\n    2\n    \"\"\"\n")
    inputs = [[[rng.randint(0, 2 * k) for _ in range(rng.randint(0, 6))]] for _ in range(5)]
    results = [sum(1 for x in inp[0] if x > k) for inp in inputs]
    test = ("\n\nimport numpy as np\n\ndef is_floats(x) -> bool:\n    return isinstance(x, float)\n\n"
            "def assertion(out, exp, atol):\n    exact_match = out == exp\n    if atol == 0 and is_floats(exp):\n"
            "        atol = 1e-6\n    if not exact_match and atol != 0:\n        assert np.allclose(out, exp, rtol=1e-07, atol=atol)\n"
            "    else:\n        assert exact_match, f\"out: {out}, exp: {exp}\"\n\n\n"
            f"def check(candidate):\n    inputs = {inputs!r}\n    results = {results!r}\n"
            "    for i, (inp, exp) in enumerate(zip(inputs, results)):\n        assertion(candidate(*inp), exp, 0)\n")
    return {"task_id": f"HumanEval/{i}", "prompt": prompt,
            "canonical_solution": f"    return sum(1 for x in numbers if x > {k})\n", "entry_point": name, "test": test}


def main(out: Path = HERE) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(20261205)
    rows = mbpp_rows(rng)
    schema = pa.schema([("task_id", pa.int32()), ("text", pa.string()), ("code", pa.string()),
                        ("test_list", pa.list_(pa.string())), ("test_setup_code", pa.string()),
                        ("challenge_test_list", pa.list_(pa.string()))])
    for name, card in CARD.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "README.md").write_text(card)
    (out / "mbpp" / "full").mkdir(exist_ok=True)
    at = 0
    for split, n in SPLITS.items():
        part = [{"task_id": 11 + at + j, **r} for j, r in enumerate(rows[at:at + n])]
        pq.write_table(pa.Table.from_pylist(part, schema=schema), out / "mbpp" / "full" / f"{split}-00000-of-00001.parquet")
        at += n
    (out / "humanevalplus" / "data").mkdir(exist_ok=True)
    heldout = [humaneval_row(i, k, rng) for i, k in enumerate(range(3, 43))]
    pq.write_table(pa.Table.from_pylist(heldout), out / "humanevalplus" / "data" / "test-00000-of-00001-7d1f9c2e.parquet")
    print(f"written: {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
