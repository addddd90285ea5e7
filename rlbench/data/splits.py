"""Build, fingerprint, store and load a task's four splits.

Train and dev go under the public root, test and heldout under the hidden root: the two never
share a folder, so assembling an agent's workspace from the public root cannot leak a hidden split.
Splits are disjoint at the prompt level, deterministic per seed, and fingerprinted; a stored split
whose content no longer matches its fingerprint is refused.

The seed a procedural task's splits are drawn from is secret by default: an HMAC of the task's
public `data.seed` under a per-installation secret (`hidden_root()/secrets/splits.secret`, made on
first use, mode 600), so an agent that imports this module and knows the task file still cannot
redraw test or heldout. All four splits come from it, train and dev too: a public train stream
would show an agent which prompts the real train skipped, and those are exactly the hidden ones.
`RLBENCH_SPLIT_SEED=public` draws from `data.seed` alone, as before (the tests, and reproducing
published numbers); the two never share a stored folder, and scores are cached by fingerprint.
Fixed datasets (`data.source: hf`) are public whatever the setting: their splits are the
dataset's own, and `seed_source` says `public` for them.
"""

from __future__ import annotations

import copy
import hashlib
import hmac
import json
import os
import random
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError, check, to_dict
from rlbench.data.generators import draw_distinct, resolve_generator, split_family
from rlbench.data.waves import draw_wave
from rlbench.io import atomic_write_json, file_lock, read_json
from rlbench.paths import hidden_root, public_root, stored_secret
from rlbench.tasks.spec import HIDDEN_SPLITS, SPLITS, DataSource, TaskConfig

# hidden splits are drawn first, so that changing the train size never changes test or heldout
_DRAW_ORDER = ("test", "heldout", "dev", "train")
SPLIT_SEED_ENV = "RLBENCH_SPLIT_SEED"
SEED_SOURCES = ("secret", "public")


def seed_source(task: TaskConfig) -> str:
    """`secret` (the default) or `public`, from RLBENCH_SPLIT_SEED; a fixed dataset is always
    `public`. An environment setting, like RLBENCH_HOME: it belongs to the installation (the
    secret is the installation's), and every process of a run reads the same one."""
    value = os.environ.get(SPLIT_SEED_ENV, "").strip() or "secret"
    check(value in SEED_SOURCES, SPLIT_SEED_ENV, value, ", ".join(SEED_SOURCES))
    return value if task.data.source == DataSource.generator else "public"


def splits_secret() -> str:
    """This installation's split secret (made on first use; never inside a workspace)."""
    return stored_secret(splits_secret_path())


def splits_secret_path() -> Path:
    return hidden_root() / "secrets" / "splits.secret"


def secret_id(secret: str) -> str:
    """Which secret, as a digest that tells two secrets apart and never gives one away."""
    return hashlib.sha256(f"rlbench-split-secret-id:{secret}".encode()).hexdigest()[:16]


class SplitsUnavailable(RuntimeError):
    """This process would not draw the splits the suite's driver draws: scoring here would give
    numbers on other hidden data."""


def splits_identity(task: TaskConfig, create: bool = True) -> str:
    """Which hidden splits this process draws for `task`: the seed source, and for secret splits
    which secret (a digest). Two processes with the same identity draw the same splits; a node of
    a cluster compares its own with the driver's before it runs a cell. With `create` off, a
    missing secret is an error instead of a new secret (a node must not invent its own splits)."""
    source = seed_source(task)
    if source == "public":
        return "public"
    if not create and not splits_secret_path().is_file():
        raise SplitsUnavailable(f"no split secret at {splits_secret_path()} on this node")
    return f"secret:{secret_id(splits_secret())}"


def draw_seed(task: TaskConfig) -> str:
    """The seed the splits are drawn from: `data.seed` itself in public mode (so public
    fingerprints are what they always were), else HMAC-SHA256(installation secret, data.seed)."""
    if seed_source(task) == "public":
        return str(task.data.seed)
    return hmac.new(splits_secret().encode(), f"splits:{task.data.seed}".encode(), hashlib.sha256).hexdigest()


def fingerprint(items: list[dict[str, Any]]) -> str:
    h = hashlib.sha256()
    for item in items:
        h.update(json.dumps({"prompt": item["prompt"], "answer": item["answer"]}, sort_keys=True).encode())
        h.update(b"\n")
    return h.hexdigest()


def data_key(task: TaskConfig) -> str:
    """The standard splits' key: a wave changes test and heldout only, so it is not part of it.
    It ends in the seed source, and a secret key also hashes which secret (a digest, never the
    secret), so public and secret splits, or two secrets' splits, never share a stored folder."""
    from rlbench.data.prompts import prompt_key

    data = to_dict(task.data)
    data.pop("wave", None)
    if data.get("hf"):  # fields an hf task leaves at their defaults keep the key it had before they existed
        data["hf"] = {k: v for k, v in data["hf"].items()
                      if k not in ("sources", "revision", "prompt_template", "answer_template", "answer_fields", "answer_extract") or v}
    source = seed_source(task)
    blob: dict[str, Any] = {"version": task.version, "data": data, "seed_source": source}
    if task.prompt.active:  # a task without a prompt config keeps the key (and stored splits) it always had
        blob["prompt"] = prompt_key(task.prompt, task.model.base)
    if source == "secret":
        blob["secret_id"] = secret_id(splits_secret())
    return f"{hashlib.sha256(json.dumps(blob, sort_keys=True).encode()).hexdigest()[:16]}-{source}"


@dataclass
class TaskData:
    """The four splits of one task as lists of dicts, with their fingerprints and where their seed
    came from (`secret` or `public`, see seed_source)."""

    splits: dict[str, list[dict[str, Any]]]
    fingerprints: dict[str, str]
    key: str
    seed_source: str

    def prompts(self, split: str) -> list[str]:
        return [item["prompt"] for item in self.splits[split]]

    def record(self) -> dict[str, Any]:
        """What every reported number carries: the seed source and each split's fingerprint (16 hex)."""
        return {"seed_source": self.seed_source, "fingerprints": {s: self.fingerprints[s][:16] for s in SPLITS}}


def generate_splits(task: TaskConfig, task_folder: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """Draw all four splits from the task's generator, rejecting any prompt already drawn."""
    gen = resolve_generator(task.data.generator, task_folder)
    seed = draw_seed(task)
    seen: set[str] = set()
    out: dict[str, list[dict[str, Any]]] = {}
    for split in _DRAW_ORDER:
        want = getattr(task.data.sizes, split)
        out[split] = draw_distinct(gen, split_family(gen, split), random.Random(f"{seed}:{split}"), want,
                                   task.data.params, seen, split,
                                   f"key 'data.sizes.{split}': value '{want}' is not reachable (lower the size)")
    return {s: out[s] for s in SPLITS}


def load_hf_splits(task: TaskConfig) -> dict[str, list[dict[str, Any]]]:
    """Read the four splits from HF `datasets` sources (a hub id at a pinned revision, or a local
    builder or folder), each split from its own source where the task gives one. The question is a
    row's `prompt_field`, or its fields formatted into `prompt_template`."""
    import datasets

    spec = task.data.hf
    assert spec is not None
    out: dict[str, list[dict[str, Any]]] = {}
    for split in SPLITS:
        src = spec.source(split)
        kwargs: dict[str, Any] = {}
        if src.data_files:
            kwargs["data_files"] = dict(src.data_files)
        if src.revision:
            kwargs["revision"] = src.revision
        where = f"split '{src.split}' of '{src.path}'" + (f" at revision {src.revision}" if src.revision else "")
        try:
            ds = datasets.load_dataset(src.path, src.name, split=src.split, **kwargs)
        except Exception as exc:
            raise ConfigError(f"key 'data.hf': cannot load {where} (for {split}): {exc}") from exc
        fields_needed = (list(src.answer_fields) or ([src.answer_field] if not src.answer_template
                                                     else _template_fields(src.answer_template)))
        fields_needed += [src.prompt_field] if not src.prompt_template else _template_fields(src.prompt_template)
        for col in fields_needed:
            if col not in ds.column_names:
                raise ConfigError(f"key 'data.hf': {where} has no column '{col}'; it has {ds.column_names}")
        out[split] = [_hf_item(src, r, f"{split}-{i:05d}", where) for i, r in enumerate(ds)]
    check_disjoint(out)
    return out


def _hf_item(src: Any, row: dict[str, Any], item_id: str, where: str) -> dict[str, Any]:
    """One dataset row as an item: its question, its answer (the final answer by the source's
    extractor, with the whole field kept as `solution`), and an id."""
    from rlbench.rewards.extract import extract

    prompt = _fill(src.prompt_template, row) if src.prompt_template else str(row[src.prompt_field])
    if src.answer_fields:
        raw = json.dumps({f: row[f] for f in src.answer_fields}, sort_keys=True, default=str)
    else:
        raw = _fill(src.answer_template, row) if src.answer_template else str(row[src.answer_field])
    if not src.answer_extract:
        return {"prompt": prompt, "answer": raw, "id": item_id}
    answer = extract(src.answer_extract, raw)
    if answer is None:
        raise ConfigError(f"key 'data.hf.answer_extract': {where}, row {item_id}: no answer by "
                          f"'{src.answer_extract}' in {raw[-200:]!r}")
    return {"prompt": prompt, "answer": answer, "solution": raw, "id": item_id}


def _fill(template: str, row: dict[str, Any]) -> str:
    """A template filled with a row's fields; a list field (MBPP's `test_list`) one line an entry."""
    return template.format(**{k: "\n".join(map(str, v)) if isinstance(v, (list, tuple)) else v
                              for k, v in row.items()})


def _template_fields(template: str) -> list[str]:
    import string

    return [name for _, name, _, _ in string.Formatter().parse(template) if name]


def check_disjoint(splits: dict[str, list[dict[str, Any]]]) -> None:
    owner: dict[str, str] = {}
    for split, items in splits.items():
        for item in items:
            prev = owner.setdefault(item["prompt"], split)
            if prev != split:
                raise ConfigError(f"splits '{prev}' and '{split}' share the prompt {item['prompt']!r}")


def _split_dir(task: TaskConfig, key: str, split: str) -> Path:
    root = hidden_root() if split in HIDDEN_SPLITS else public_root()
    return root / "data" / task.name / f"{task.version}-{key}" / split


def _load_stored(dirs: dict[str, Path]) -> tuple[dict[str, list[dict[str, Any]]], dict[str, str]] | None:
    """Stored splits, each checked against its fingerprint; None when any is missing."""
    import datasets

    if not all((d / "rlbench_split.json").is_file() for d in dirs.values()):
        return None
    splits, prints = {}, {}
    for split, d in dirs.items():
        meta = read_json(d / "rlbench_split.json")
        items = [dict(r) for r in datasets.load_from_disk(str(d))]
        got = fingerprint(items)
        if got != meta["fingerprint"]:
            raise ConfigError(f"stored split {d} does not match its fingerprint; delete it to rebuild")
        splits[split], prints[split] = items, got
    return splits, prints


def _store(task: TaskConfig, dirs: dict[str, Path], splits: dict[str, list[dict[str, Any]]]) -> dict[str, str]:
    import datasets

    prints = {s: fingerprint(splits[s]) for s in dirs}
    for split, d in dirs.items():
        tmp = d.with_name(d.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        datasets.Dataset.from_list(splits[split]).save_to_disk(str(tmp))
        atomic_write_json(tmp / "rlbench_split.json", {
            "task": task.name, "version": task.version, "split": split, "wave": task.data.wave,
            "seed_source": seed_source(task),
            "n": len(splits[split]), "fingerprint": prints[split],
        })
        shutil.rmtree(d, ignore_errors=True)
        tmp.rename(d)
    return prints


def prepare_data(task: TaskConfig, task_folder: Path | None = None, tokenizer_dir: Path | None = None) -> TaskData:
    """Build (or load the stored) splits of `task`, checking each against its fingerprint. With
    `data.wave` set, test and heldout are that wave's (rlbench/data/waves.py); train and dev stay.
    A task with a `prompt` section has its prompts rendered as they are built (rlbench/data/prompts.py);
    with `prompt.chat`, building them needs the base model's folder (`tokenizer_dir`) for its template."""
    import datasets

    from rlbench.data.prompts import render_splits
    from rlbench.rewards import check_answers

    datasets.disable_progress_bars()
    key = data_key(task)
    if task.data.wave:
        return _with_wave(task, task_folder, key, tokenizer_dir)
    dirs = {s: _split_dir(task, key, s) for s in SPLITS}
    stored = _load_stored(dirs)
    if stored is None:  # two cells of a suite that start at once: one builds, the other then reads
        with file_lock(hidden_root() / "data" / task.name / f".{task.version}-{key}.lock"):
            stored = _load_stored(dirs)
            if stored is None:
                splits = load_hf_splits(task) if task.data.source == DataSource.hf else generate_splits(task, task_folder)
                splits = render_splits(task.prompt, splits, tokenizer_dir)
                stored = splits, _store(task, dirs, splits)
    check_answers(task.reward.name, stored[0])
    return TaskData(splits=stored[0], fingerprints=stored[1], key=key, seed_source=seed_source(task))


def _with_wave(task: TaskConfig, task_folder: Path | None, key: str, tokenizer_dir: Path | None) -> TaskData:
    if task.prompt.active:  # a wave is drawn against the standard splits' questions, which rendering changed
        raise ConfigError(f"task {task.name}: test waves are not drawn for tasks with a prompt section")
    standard_task = copy.deepcopy(task)
    standard_task.data.wave = ""
    standard = prepare_data(standard_task, task_folder, tokenizer_dir)
    dirs = {s: hidden_root() / "data" / task.name / f"{task.version}-{key}-wave-{task.data.wave}" / s
            for s in HIDDEN_SPLITS}
    with file_lock(hidden_root() / "data" / task.name / f".{task.version}-{key}-wave-{task.data.wave}.lock"):
        stored = _load_stored(dirs)
        if stored is None:
            hidden = draw_wave(task, standard.splits, task.data.wave, task_folder)
            stored = hidden, _store(task, dirs, hidden)
    hidden, prints = stored
    from rlbench.rewards import check_answers

    check_answers(task.reward.name, hidden)
    return TaskData(splits={**standard.splits, **hidden}, fingerprints={**standard.fingerprints, **prints},
                    key=f"{key}-wave-{task.data.wave}", seed_source=standard.seed_source)


def split_path(task: TaskConfig, split: str) -> Path:
    """Where a split of `task` is stored (for workspace assembly and for leak tests)."""
    return _split_dir(task, data_key(task), split)


def wave_overlap(task: TaskConfig, task_folder: Path | None = None) -> dict[str, float]:
    """Per hidden split of the task's wave: the share of its prompts also in the standard test or
    heldout (0.0 when the generator had room for a wholly fresh draw)."""
    standard_task = copy.deepcopy(task)
    standard_task.data.wave = ""
    std = prepare_data(standard_task, task_folder).splits
    waved = prepare_data(task, task_folder).splits
    old = {it["prompt"] for s in ("test", "heldout") for it in std[s]}
    return {s: round(sum(1 for it in waved[s] if it["prompt"] in old) / max(1, len(waved[s])), 4)
            for s in ("test", "heldout")}
