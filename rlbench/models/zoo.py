"""Zoo recipes by name, cached builds keyed by recipe hash, and loading any model reference.

A model reference is one of: a zoo recipe name (`arith-s`; built on first use), a local folder
holding a HF checkpoint, or a HF hub id (`Qwen/Qwen2.5-0.5B-Instruct`). All three end in the same
`from_pretrained` call, so a GPU user swaps a tiny zoo model for a real one by changing one string.
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import stat
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Iterator

from rlbench.config.core import ConfigError, load_config, to_dict
from rlbench.io import atomic_write_json, read_json
from rlbench.models.recipe import ModelRecipe, recipe_hash
from rlbench.paths import models_root
from rlbench.progress import info

RECIPES_DIR = Path(__file__).parent / "recipes"
META_FILE = "rlbench_model.json"


def recipe_names() -> list[str]:
    return sorted(p.stem for p in RECIPES_DIR.glob("*.yaml"))


def load_recipe(name: str, overrides: Iterable[str] = ()) -> ModelRecipe:
    path = RECIPES_DIR / f"{name}.yaml"
    if not path.is_file():
        raise ConfigError(f"unknown model recipe '{name}'; known recipes: {', '.join(recipe_names())}")
    recipe = load_config(ModelRecipe, path, overrides=overrides, source_name=str(path))
    if recipe.name != name:
        raise ConfigError(f"{path}: key 'name': value '{recipe.name}' must equal the file name '{name}'")
    return recipe


def build_dir(recipe: ModelRecipe) -> Path:
    return models_root() / f"{recipe.name}-{recipe_hash(recipe)}"


def is_built(recipe: ModelRecipe) -> bool:
    return (build_dir(recipe) / META_FILE).is_file()


@contextmanager
def _lock(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def param_count(model: Any) -> int:
    return sum(p.numel() for p in model.parameters())


def weights_hash(folder: Path) -> str:
    """A content hash of a checkpoint's weights and tokenizer: the build a result names. Not a
    cache key: other files change scores too (`files_hash` is the key)."""
    h = hashlib.sha256()
    files = sorted(p for p in Path(folder).iterdir()
                   if p.suffix in (".safetensors", ".bin") or p.name in ("tokenizer.json", "config.json"))
    if not files:
        raise ConfigError(f"{folder} holds no weights (*.safetensors or *.bin)")
    for p in files:
        h.update(p.name.encode())
        with open(p, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def files_hash(folder: Path) -> str:
    """Every regular file under `folder`, by relative name, size and bytes: a checkpoint's identity
    as the harness scores it. Any file `from_pretrained` reads can change a score (a
    generation_config.json with min_p does, with the same weights), so none is left out. Never
    follows a link: a link or any other entry that is not a plain file or folder raises
    ConfigError (a harness-owned copy holds none)."""
    root = Path(folder)
    h = hashlib.sha256()
    entries = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode):
                continue
            if not stat.S_ISREG(mode):
                raise ConfigError(f"{folder}: '{path.relative_to(root)}' is not a plain file")
            entries.append(path)
    if not entries:
        raise ConfigError(f"{folder} holds no files")
    for path in sorted(entries, key=lambda p: p.relative_to(root).as_posix()):
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            if not stat.S_ISREG(os.fstat(fh.fileno()).st_mode):
                raise ConfigError(f"{folder}: '{path.relative_to(root)}' is not a plain file")
            name = path.relative_to(root).as_posix().encode()
            h.update(len(name).to_bytes(8, "big") + name + os.fstat(fh.fileno()).st_size.to_bytes(8, "big"))
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:24]


def build(recipe: ModelRecipe, force: bool = False) -> Path:
    """Pretrain `recipe` and save it with `save_pretrained`, unless an identical build exists.

    Written to a temporary folder and renamed, so a crash mid-build leaves nothing that looks
    finished; a lock keeps two processes from building the same recipe at once.
    """
    from transformers.utils import logging as hf_logging

    from rlbench.models.pretrain import pretrain
    from rlbench.models.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer

    hf_logging.disable_progress_bar()  # our own progress output is enough

    target = build_dir(recipe)
    with _lock(target.with_name(target.name + ".lock")):
        if is_built(recipe) and not force:
            return target
        info(f"building model [bold]{recipe.name}[/] ({recipe_hash(recipe)}) into {target}")
        started = time.monotonic()
        tokenizer = build_char_tokenizer(recipe.alphabet or DEFAULT_ALPHABET)
        model, log = pretrain(recipe, tokenizer)
        tmp = target.with_name(target.name + ".tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        model.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        meta = {
            "name": recipe.name,
            "recipe_hash": recipe_hash(recipe),
            "recipe": to_dict(recipe),
            "parameters": param_count(model),
            "build_seconds": round(time.monotonic() - started, 1),
            "pretrain": {"steps": log.steps, "seconds": log.seconds, "stopped_by": log.stopped_by,
                         "curve": log.curve},
            "weights_hash": weights_hash(tmp),
        }
        atomic_write_json(tmp / META_FILE, meta)
        shutil.rmtree(target, ignore_errors=True)
        tmp.rename(target)
        info(f"built {recipe.name}: {meta['parameters']:,} parameters, {log.steps} steps, "
             f"{meta['build_seconds']} s ({log.stopped_by})")
        return target


def model_meta(folder: Path) -> dict[str, Any] | None:
    path = Path(folder) / META_FILE
    return read_json(path) if path.is_file() else None


@dataclass
class ResolvedModel:
    ref: str
    location: str  # a local folder or a hub id, what `from_pretrained` receives
    kind: str  # zoo | local | hub


def resolve_model(ref: str, build_missing: bool = True) -> ResolvedModel:
    """Turn a model reference into what `from_pretrained` loads, building zoo models on demand."""
    if ref in recipe_names():
        recipe = load_recipe(ref)
        if not is_built(recipe):
            if not build_missing:
                raise ConfigError(f"zoo model '{ref}' is not built; run `rlbench models build {ref}`")
            build(recipe)
        return ResolvedModel(ref, str(build_dir(recipe)), "zoo")
    path = Path(ref).expanduser()
    if path.exists():
        if not (path / "config.json").is_file():
            raise ConfigError(f"model folder {path} has no config.json: not a HF checkpoint")
        return ResolvedModel(ref, str(path.resolve()), "local")
    if ref.count("/") == 1 and not ref.startswith((".", "/")):
        return ResolvedModel(ref, ref, "hub")
    raise ConfigError(
        f"model '{ref}' is neither a zoo recipe ({', '.join(recipe_names())}), an existing folder, "
        "nor a hub id of the form owner/name"
    )


def load_model(ref: str, device: str = "cpu", dtype: Any = None, build_missing: bool = True,
               attention: str | None = None):
    """(model, tokenizer, resolved) through the real `from_pretrained` path for all three kinds."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # our own progress output is enough
    resolved = resolve_model(ref, build_missing=build_missing)
    try:
        tokenizer = AutoTokenizer.from_pretrained(resolved.location)
        extra = {"attn_implementation": attention} if attention else {}
        model = AutoModelForCausalLM.from_pretrained(resolved.location, dtype=dtype or torch.float32, **extra)
    except OSError as exc:
        hint = " (no model hub is reachable from here: use a zoo name or a local folder)" if resolved.kind == "hub" else ""
        raise ConfigError(f"cannot load model '{ref}' from {resolved.location}: {exc}{hint}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(device)
    model.eval()
    from rlbench.engines.hf_generate import harness_generation

    harness_generation(model)  # the checkpoint's generation_config.json never steers the harness's sampling
    return model, tokenizer, resolved
