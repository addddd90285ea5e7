"""Builds this task's stand-ins (run from the project root: `python tasks/gsm8k-grpo/standin/make.py`).

- `gsm8k/`: a local dataset folder laid out as the hub's `openai/gsm8k` is (README.md with its
  `configs:` header, `main/train-00000-of-00001.parquet`, `main/test-00000-of-00001.parquet`,
  columns `question` and `answer`, answers worked with `<<a+b=c>>` annotations and ending
  `#### N`), so `load_dataset(FOLDER, "main", split="train[:95%]")` reads it exactly as the real one;
- `svamp/`: the same for `ChilleD/SVAMP` (`data/test-00000-of-00001.parquet`; ID, Body, Question,
  Equation, Answer as a float, Type);
- `model/`: a random Qwen2 with a byte-level BPE tokenizer and the ChatML template
  (rlbench/models/standin.py).

The problems are templated, drawn from a fixed seed: the files are the same bytes on every run.
"""

from __future__ import annotations

import random
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parents[2]))

CARD = {"gsm8k": "---\nconfigs:\n- config_name: main\n  data_files:\n  - split: train\n    path: main/train-*\n"
                 "  - split: test\n    path: main/test-*\n---\n# gsm8k stand-in (rlbench): the layout of openai/gsm8k\n",
        "svamp": "---\nconfigs:\n- config_name: default\n  data_files:\n  - split: test\n    path: data/test-*\n---\n"
                 "# SVAMP stand-in (rlbench): the layout of ChilleD/SVAMP\n"}
NAMES = ["Natalia", "Weng", "Betty", "Julie", "James", "Albert", "Ken", "Alexis", "Tina", "Randy"]
THINGS = ["clips", "apples", "stamps", "marbles", "books", "pencils", "cookies", "shells"]


def gsm8k_row(rng: random.Random) -> dict[str, str]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b, k = rng.randint(5, 90), rng.randint(2, 9), rng.randint(2, 6)
    kind = rng.randrange(3)
    if kind == 0:
        q = (f"{name} had {a} {thing}. {name} bought {b} boxes with {k} {thing} in each box. "
             f"How many {thing} does {name} have now?")
        bk = b * k
        sol = f"{name} bought {b} * {k} = <<{b}*{k}={bk}>>{bk} {thing}.\nSo {name} has {a} + {bk} = <<{a}+{bk}={a + bk}>>{a + bk} {thing}."
        ans = a + bk
    elif kind == 1:
        total = a * k
        q = f"{name} earns ${a} an hour and works {k} hours. Then {name} spends ${b}. How much money is left?"
        sol = f"{name} earns {a} * {k} = <<{a}*{k}={total}>>{total} dollars.\nAfter spending, {total} - {b} = <<{total}-{b}={total - b}>>{total - b} dollars are left."
        ans = total - b
    else:
        half = a * 2
        q = f"{name} sold {half} {thing} in April, and then half as many in May. How many {thing} did {name} sell in all?"
        sol = f"In May {name} sold {half} / 2 = <<{half}/2={a}>>{a} {thing}.\nIn all {half} + {a} = <<{half}+{a}={half + a}>>{half + a} {thing}."
        ans = half + a
    return {"question": q, "answer": f"{sol}\n#### {ans}"}


def svamp_row(rng: random.Random, i: int) -> dict[str, object]:
    name, thing = rng.choice(NAMES), rng.choice(THINGS)
    a, b = rng.randint(10, 99), rng.randint(1, 9)
    return {"ID": f"chal-{i}", "Body": f"{name} has {a} {thing}. {name} gives away {b} {thing}.",
            "Question": f"How many {thing} does {name} have left?", "Equation": f"( {a:.1f} - {b:.1f} )",
            "Answer": float(a - b), "Type": "Subtraction", "question_concat": ""}


def main(out: Path = HERE) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    from rlbench.models.standin import build_chat_standin

    rng = random.Random(20261205)
    rows: list[dict[str, str]] = []
    seen: set[str] = set()
    while len(rows) < 300:
        row = gsm8k_row(rng)
        if row["question"] not in seen:
            seen.add(row["question"])
            rows.append(row)
    svamp = []
    while len(svamp) < 60:
        row = svamp_row(rng, len(svamp))
        if row["Body"] not in seen:
            seen.add(str(row["Body"]))
            svamp.append(row)
    for name, card in CARD.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "README.md").write_text(card)
    (out / "gsm8k" / "main").mkdir(exist_ok=True)
    (out / "svamp" / "data").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist(rows[:240]), out / "gsm8k" / "main" / "train-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(rows[240:]), out / "gsm8k" / "main" / "test-00000-of-00001.parquet")
    pq.write_table(pa.Table.from_pylist(svamp), out / "svamp" / "data" / "test-00000-of-00001.parquet")
    build_chat_standin(out / "model")
    print(f"written: {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
