"""Instruction-following rewards: a completion is scored by IFEval's own verifiable checkers.

The answer of an instruction item is a JSON object of the dataset row's `instruction_id_list`,
its `kwargs` (one dict per instruction: a list, or the JSON text of one as argilla's
ifeval-like-data stores it; a null value is an unset key, as in google/IFEval's parquet) and,
where present, its `prompt`. The checkers are IFEval's (Google's `instructions.py`, packaged by
`if-verifiable`), so a score here is IFEval's score: `binary_strict` is its prompt-level strict
accuracy, the number the field reports.

Three things make the score the same on every machine. IFEval's `build_description` draws a
random value for an argument the row leaves unset: the draw is seeded by the instruction and its
arguments. `langdetect` is seeded. Two checkers (`length_constraints:number_sentences`,
`change_case:capital_word_frequency`) tokenize with NLTK's `punkt_tab`, which is data, not code:
it is read from `RLBENCH_HOME/nltk_data` (or NLTK's own paths), and a task whose items need it is
refused before any work where it is missing, never scored without it (check_instruction_answers).
"""

from __future__ import annotations

import functools
import json
import random
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

from rlbench.config.core import ConfigError, check

SCORES = ("binary_strict", "binary_loose", "partial_strict", "partial_loose")
# the checkers that tokenize with NLTK data, and the NLTK resource each needs
NLTK_NEEDS = {"length_constraints:number_sentences": "punkt_tab", "change_case:capital_word_frequency": "punkt_tab"}
_NLTK_PATHS = {"punkt_tab": "tokenizers/punkt_tab/english/"}
MAX_INSTRUCTIONS = 32  # per item: IFEval's prompts hold 1-3


@dataclass(frozen=True)
class Instructions:
    """One item's instructions: the ids, each one's arguments (unset ones dropped) and the prompt."""

    ids: tuple[str, ...]
    kwargs: tuple[dict[str, Any], ...]
    prompt: str


def nltk_home() -> Path:
    """Where the harness keeps NLTK's data: RLBENCH_HOME/nltk_data, searched before NLTK's own paths."""
    import nltk

    from rlbench.paths import home

    where = home() / "nltk_data"
    if str(where) not in nltk.data.path:
        nltk.data.path.insert(0, str(where))
    return where


@functools.lru_cache(maxsize=1)
def registry() -> Mapping[str, Any]:
    """IFEval's instruction registry (id -> checker class), imported once, with langdetect seeded."""
    import langdetect

    from if_verifiable.ifeval import INSTRUCTION_DICT

    nltk_home()
    langdetect.DetectorFactory.seed = 0
    return INSTRUCTION_DICT


def parse_answer(answer: Any) -> Instructions:
    """An item's answer as its instructions; ValueError says what is wrong with it."""
    try:
        obj = json.loads(answer) if isinstance(answer, str) else answer
    except json.JSONDecodeError as exc:
        raise ValueError(f"the answer is not JSON: {exc}") from None
    if not isinstance(obj, Mapping) or "instruction_id_list" not in obj:
        raise ValueError("the answer is not an object with 'instruction_id_list' and 'kwargs'")
    ids, kwargs = obj["instruction_id_list"], obj.get("kwargs")
    if isinstance(kwargs, str):
        kwargs = json.loads(kwargs)
    if kwargs is None:
        kwargs = [{} for _ in ids]
    if not isinstance(ids, list) or not all(isinstance(i, str) for i in ids) or not 0 < len(ids) <= MAX_INSTRUCTIONS:
        raise ValueError(f"'instruction_id_list' is not a list of 1-{MAX_INSTRUCTIONS} ids: {str(ids)[:200]}")
    if not isinstance(kwargs, list) or len(kwargs) != len(ids) or not all(isinstance(k, (Mapping, type(None))) for k in kwargs):
        raise ValueError(f"'kwargs' is not one object per instruction: {str(kwargs)[:200]}")
    known = registry()
    for i in ids:
        if i not in known:
            raise ValueError(f"instruction '{i}' is not one of IFEval's {len(known)}")
    return Instructions(ids=tuple(ids), kwargs=tuple({k: v for k, v in (kw or {}).items() if v is not None} for kw in kwargs),
                        prompt=str(obj.get("prompt") or ""))


def _checker(instruction_id: str, kwargs: dict[str, Any], prompt: str) -> Any:
    """IFEval's checker, built with a seeded draw for any argument the item leaves unset."""
    cls = registry()[instruction_id]
    state = random.getstate()
    random.seed(json.dumps([instruction_id, kwargs], sort_keys=True, default=str))
    try:
        checker = cls(instruction_id)
        checker.build_description(**kwargs)
        args = checker.get_instruction_args()
        if args and "prompt" in args:
            checker.build_description(prompt=prompt)
    finally:
        random.setstate(state)
    return checker


def _follows(checker: Any, text: str) -> bool:
    """Whether `text` follows one instruction. A checker that raises on a reply (a malformed
    one) counts it as not followed; missing NLTK data is not the reply's fault, so it raises."""
    if not text.strip():
        return False
    try:
        return bool(checker.check_following(text))
    except LookupError:
        raise
    except Exception:  # noqa: BLE001 - IFEval's checkers raise on some malformed replies
        return False


def instruction_scores(completion: str, answer: Any) -> dict[str, float]:
    """All four IFEval scores of one completion: strict checks the reply as it is; loose also
    tries it without its first and/or last line and without markdown asterisks (IFEval's own
    transformations); binary is 1 when every instruction is followed, partial the fraction."""
    from if_verifiable.common import get_loose_transformations, strip_thinking

    item = parse_answer(answer)
    reply = strip_thinking(str(completion))
    variants = get_loose_transformations(reply)
    strict, loose = [], []
    for iid, kw in zip(item.ids, item.kwargs):
        checker = _checker(iid, kw, item.prompt)
        strict.append(_follows(checker, reply))
        loose.append(any(_follows(checker, v) for v in variants))
    n = len(item.ids)
    return {"binary_strict": float(all(strict)), "binary_loose": float(all(loose)),
            "partial_strict": sum(strict) / n, "partial_loose": sum(loose) / n}


def if_instructions(completion: str, answer: str, score: str = "binary_strict") -> float:
    """IFEval's `score` of a completion against the item's instructions (binary_strict: 1.0 when
    it follows every instruction as written)."""
    return instruction_scores(completion, answer)[score]


def check_if_instructions(score: str = "binary_strict") -> None:
    check(score in SCORES, "reward.params.score", score, ", ".join(SCORES))


def missing_nltk_data(ids: Iterable[str]) -> list[str]:
    """The NLTK resources the given instructions need that this machine lacks."""
    import nltk

    nltk_home()
    missing = []
    for resource in sorted({NLTK_NEEDS[i] for i in ids if i in NLTK_NEEDS}):
        try:
            nltk.data.find(_NLTK_PATHS[resource])
        except LookupError:
            missing.append(resource)
    return missing


def check_instruction_answers(answers: Iterable[tuple[str, Any]]) -> None:
    """Every (split, answer) of a task, checked when its splits are built or loaded, before any
    cell works on them: each parses to known instructions, and the NLTK data their checkers need
    is here. A task never scores an item it cannot check the same way everywhere."""
    ids: set[str] = set()
    for split, answer in answers:
        try:
            ids |= set(parse_answer(answer).ids)
        except ValueError as exc:
            raise ConfigError(f"reward 'if_instructions': an item of split '{split}': {exc}") from None
    missing = missing_nltk_data(ids)
    if missing:
        need = sorted(i for i in ids if i in NLTK_NEEDS)
        raise ConfigError(
            f"reward 'if_instructions': the task's items use {', '.join(need)}, whose IFEval checkers need the "
            f"NLTK data {', '.join(missing)}, not found on this machine. Fetch it once where the hub is reachable: "
            f"python -m nltk.downloader -d {nltk_home()} {' '.join(missing)}")
