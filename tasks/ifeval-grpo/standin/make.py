"""Builds this task's stand-in datasets (run from the project root: `python tasks/ifeval-grpo/standin/make.py`).

- `ifeval-like-data/`: a local dataset folder laid out as the hub's `argilla/ifeval-like-data`
  (README.md with its `configs:` header, `filtered/train-00000-of-00001.parquet`; columns key,
  prompt, response, instruction_id_list (a list of ids), kwargs: the JSON text of one dict per
  instruction, as that dataset stores it);
- `IFEval/`: the same for `google/IFEval` (`ifeval_input_data.jsonl` at the root, one split
  `train`; columns key, prompt, instruction_id_list, kwargs: one object per instruction holding
  only its own arguments, which `datasets` reads as structs with every other key null).

The model is gsm8k-grpo's stand-in of Qwen/Qwen2.5-0.5B (the same base model). A prompt is a
short writing request followed by IFEval's own wording of one or two instructions
(`build_description`), drawn from a fixed seed: the files are the same bytes on every run. Only
instructions whose checkers need no NLTK data are used, so CI needs none; the real data has two
that do (rlbench/rewards/instructions.py). Every `response` follows its prompt's instructions,
as the `filtered` config's responses do (tests/test_instruction_reward.py checks them all).
"""

from __future__ import annotations

import json
import random
import sys
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent

CARD = {"ifeval-like-data": "---\nconfigs:\n- config_name: filtered\n  data_files:\n  - split: train\n    path: filtered/train-*\n---\n"
                            "# ifeval-like-data stand-in (rlbench): the layout of argilla/ifeval-like-data\n",
        "IFEval": "---\nlicense: apache-2.0\n---\n# IFEval stand-in (rlbench): the layout of google/IFEval\n"}
TOPICS = ["rivers", "mountains", "bicycles", "libraries", "gardens", "trains", "bread", "owls", "winter", "lighthouses",
          "markets", "bridges", "kites", "tea", "forests", "islands", "clocks", "maps", "bees", "harbors",
          "deserts", "violins", "lanterns", "orchards", "glaciers", "museums", "ferries", "meadows", "comets", "pottery"]
WORDS = ["stone", "light", "river", "quiet", "morning", "path", "green", "song", "window", "harvest"]
ENDINGS = ["Any other questions?", "Is there anything else I can help with?", "That is all."]
REQUESTS = {"ifeval-like-data": ["Write a short note about {t}.", "Tell me something about {t}.", "Give a brief description of {t}."],
            "IFEval": ["Write a short poem about {t}.", "Describe {t} to a child.", "Write an advertisement for {t}."]}


def draw_instruction(rng: random.Random) -> tuple[str, dict[str, Any]]:
    """One IFEval instruction id and its arguments (only checkers that need no NLTK data)."""
    kind = rng.choice(["punctuation:no_comma", "change_case:english_lowercase", "change_case:english_capital",
                       "keywords:existence", "keywords:forbidden_words", "length_constraints:number_words",
                       "detectable_format:title", "startend:end_checker", "startend:quotation",
                       "detectable_content:postscript", "keywords:letter_frequency",
                       "detectable_format:number_bullet_lists", "keywords:frequency"])
    args: dict[str, Any] = {
        "keywords:existence": lambda: {"keywords": rng.sample(WORDS, 2)},
        "keywords:forbidden_words": lambda: {"forbidden_words": rng.sample(["cloud", "rain", "storm", "night"], 2)},
        "length_constraints:number_words": lambda: {"num_words": rng.randint(30, 80), "relation": "less than"},
        "startend:end_checker": lambda: {"end_phrase": rng.choice(ENDINGS)},
        "detectable_content:postscript": lambda: {"postscript_marker": rng.choice(["P.S.", "P.P.S"])},
        "keywords:letter_frequency": lambda: {"letter": rng.choice("qxzj"), "let_frequency": rng.randint(1, 3),
                                              "let_relation": "less than"},
        "detectable_format:number_bullet_lists": lambda: {"num_bullets": rng.randint(1, 4)},
        "keywords:frequency": lambda: {"keyword": rng.choice(WORDS), "frequency": rng.randint(1, 3), "relation": "at least"},
    }.get(kind, dict)()
    return kind, args


def reply(topic: str, ids: list[str], kwargs: list[dict[str, Any]]) -> str:
    """A reply that means to follow the instructions; the caller keeps it only where it does."""
    words = f"the {topic} are calm and bright today".split()
    for iid, kw in zip(ids, kwargs):
        if iid == "keywords:existence":
            words += kw["keywords"]
        if iid == "keywords:frequency":
            words += [kw["keyword"]] * kw["frequency"]
    text = " ".join(words) + "."
    if "detectable_format:number_bullet_lists" in ids:
        n = kwargs[ids.index("detectable_format:number_bullet_lists")]["num_bullets"]
        text = "\n".join(f"* {text}" for _ in range(n))
    if "detectable_format:title" in ids:
        text = f"<<{topic}>>\n{text}"
    if "detectable_content:postscript" in ids:
        text += f"\n{kwargs[ids.index('detectable_content:postscript')]['postscript_marker']} more on {topic} soon."
    if "change_case:english_capital" in ids:
        text = text.upper()
    if "change_case:english_lowercase" in ids:
        text = text.lower()
    if "startend:end_checker" in ids:
        text += " " + kwargs[ids.index("startend:end_checker")]["end_phrase"]
    if "startend:quotation" in ids:
        text = f'"{text}"'
    return text


def rows(source: str, n: int, rng: random.Random) -> list[dict[str, Any]]:
    from rlbench.rewards.instructions import instruction_scores, registry

    out: list[dict[str, Any]] = []
    seen: set[str] = set()
    while len(out) < n:
        topic = rng.choice(TOPICS)
        drawn = dict(draw_instruction(rng) for _ in range(rng.randint(1, 2)))
        ids, kwargs = list(drawn), list(drawn.values())
        text = " ".join([rng.choice(REQUESTS[source]).format(t=topic)]
                        + [registry()[i](i).build_description(**kw) for i, kw in zip(ids, kwargs)])
        response = reply(topic, ids, kwargs)
        answer = {"instruction_id_list": ids, "kwargs": kwargs, "prompt": text}
        if text in seen or instruction_scores(response, answer)["binary_strict"] != 1.0:
            continue  # instructions this reply cannot follow together (lowercase with a capitalized end phrase)
        seen.add(text)
        out.append({"key": 1000 + len(out), "prompt": text, "response": response, "instruction_id_list": ids, "kwargs": kwargs})
    return out


def main(out: Path = HERE) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    rng = random.Random(20261206)
    for name, card in CARD.items():
        (out / name).mkdir(parents=True, exist_ok=True)
        (out / name / "README.md").write_text(card)
    like = rows("ifeval-like-data", 600, rng)
    schema = pa.schema([("key", pa.int64()), ("prompt", pa.string()), ("response", pa.string()),
                        ("instruction_id_list", pa.list_(pa.string())), ("kwargs", pa.string())])
    (out / "ifeval-like-data" / "filtered").mkdir(exist_ok=True)
    pq.write_table(pa.Table.from_pylist([{**r, "kwargs": json.dumps(r["kwargs"])} for r in like], schema=schema),
                   out / "ifeval-like-data" / "filtered" / "train-00000-of-00001.parquet")
    ifeval = rows("IFEval", 60, rng)
    with open(out / "IFEval" / "ifeval_input_data.jsonl", "w") as f:
        for r in ifeval:
            f.write(json.dumps({k: r[k] for k in ("key", "prompt", "instruction_id_list", "kwargs")}) + "\n")
    print(f"written: {out}")


if __name__ == "__main__":
    sys.path.insert(0, str(HERE.parents[2]))
    main(Path(sys.argv[1]) if len(sys.argv) > 1 else HERE)
