"""Procedural problem generators.

A generator is `fn(family, rng, params) -> dict` with at least `prompt` and `answer`. Family `main`
feeds train, dev and test; family `heldout` is the shifted distribution used to measure
generalisation. The same functions feed the base models' pretraining corpora, so a model zoo recipe
and a task speak the same format.
"""

from __future__ import annotations

import importlib
import importlib.util
import random
from pathlib import Path
from typing import Any, Protocol

from rlbench.config.core import ConfigError


class Generator(Protocol):
    def __call__(self, family: str, rng: random.Random, params: dict[str, Any]) -> dict[str, Any]: ...


def _builtin() -> dict[str, str]:
    return {"arith": "rlbench.data.generators.arith:generate",
            "arith_pairs": "rlbench.data.generators.arith:generate_pairs",
            "words": "rlbench.data.generators.words:generate",
            "calc": "rlbench.data.generators.calc:generate",
            "textgame": "rlbench.data.generators.textgame:generate",
            "honest": "rlbench.data.generators.honest:generate",
            "multiskill": "rlbench.data.generators.multiskill:generate",
            "listops": "rlbench.data.generators.listops:generate",
            "purpose": "rlbench.data.generators.purpose:generate",
            "liars": "rlbench.data.generators.liars:generate"}


def corpus_format(gen: Generator) -> tuple[str, int]:
    """(reward name, max new tokens) of a generator's format, from its module's `REWARD` and
    `MAX_NEW_TOKENS`: what a base model pretrained on the corpus is calibrated with."""
    import sys

    module = sys.modules.get(getattr(gen, "__module__", ""), None)
    return getattr(module, "REWARD", "exact_int"), int(getattr(module, "MAX_NEW_TOKENS", 8))


def corpus_tool(gen: Generator) -> dict[str, Any]:
    """The tool a generator's corpus traces call (its module's `TOOL`) and how many calls a trace
    may make (`MAX_CALLS`, default 2), as `generate` takes them: the calibration of a base model
    pretrained on the corpus plays by the corpus's rules (a text game needs up to 12 actions; two
    calls would make every game a loss). Empty for a corpus without a tool."""
    import sys

    module = sys.modules.get(getattr(gen, "__module__", ""), None)
    tool = str(getattr(module, "TOOL", ""))
    return {"tool": tool, "max_calls": int(getattr(module, "MAX_CALLS", 2))} if tool else {}


SPLIT_FAMILIES = {"train": "main", "dev": "main", "test": "main", "heldout": "heldout"}


def split_family(gen: Generator, split: str) -> str:
    """The family `gen` draws `split` from: `main` for train, dev and test and `heldout` for
    heldout, unless its module's `SPLIT_FAMILIES` says otherwise (a multi-task generator whose
    train shows the target skills only, while test also measures the skill the base already has)."""
    import sys

    module = sys.modules.get(getattr(gen, "__module__", ""), None)
    return {**SPLIT_FAMILIES, **getattr(module, "SPLIT_FAMILIES", {})}[split]


def share_param(params: dict[str, Any], key: str) -> float:
    """A generator's parameter that is a probability: a float within [0, 1], or a ValueError
    naming it (the task fails to load before any work)."""
    value = float(params[key])
    if not 0.0 <= value <= 1.0:
        raise ValueError(f"{key} {value}: must be within [0, 1]")
    return value


def generator_module(spec: str) -> str:
    """The importable module a generator spec names ('' for a task folder's `file.py`, which no
    sandbox mounts): what an endpoint task's sandbox hides, since it labels any prompt."""
    target = _builtin().get(spec, spec)
    module = target.rsplit(":", 1)[0] if ":" in target else ""
    return "" if module.endswith(".py") else module


def resolve_generator(spec: str, task_folder: Path | None = None) -> Generator:
    """A builtin name, `package.module:function`, or `file.py:function` in the task folder."""
    target = _builtin().get(spec, spec)
    if ":" not in target:
        raise ConfigError(
            f"key 'data.generator': value '{spec}' is not allowed; allowed: "
            f"{', '.join(_builtin())}, module:function or file.py:function"
        )
    mod_name, fn_name = target.rsplit(":", 1)
    if mod_name.endswith(".py"):
        if task_folder is None:
            raise ConfigError(f"generator '{spec}' names a file but no task folder is known")
        path = (task_folder / mod_name).resolve()
        if not path.is_file():
            raise ConfigError(f"key 'data.generator': file not found: {path}")
        module_spec = importlib.util.spec_from_file_location(f"rlbench_task_gen_{path.stem}", path)
        assert module_spec and module_spec.loader
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
    else:
        try:
            module = importlib.import_module(mod_name)
        except ImportError as exc:
            raise ConfigError(f"key 'data.generator': cannot import '{mod_name}': {exc}") from exc
    fn = getattr(module, fn_name, None)
    if not callable(fn):
        raise ConfigError(f"key 'data.generator': '{fn_name}' is not a function of {mod_name}")
    return fn


def draw_distinct(gen: Any, family: str, rng: random.Random, want: int, params: dict[str, Any], seen: set[str],
                  id_prefix: str, too_few: str, items: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Items from `gen` whose prompts are not in `seen` (which grows with them) until there are
    `want` (`items`: a start to add to); `too_few` is the error's start when the generator runs
    dry, or '' to return what there is then."""
    items = items if items is not None else []
    attempts = 0
    while len(items) < want:
        attempts += 1
        if attempts > 100 * want + 1000:
            if not too_few:
                return items
            raise ConfigError(f"{too_few}: the generator gave only {len(items)} distinct new prompts in "
                              f"{attempts} draws")
        item = dict(gen(family, rng, dict(params)))
        if item["prompt"] in seen:
            continue
        seen.add(item["prompt"])
        item["answer"] = str(item["answer"])
        item["id"] = f"{id_prefix}-{len(items):05d}"
        items.append(item)
    return items
