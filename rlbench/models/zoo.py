"""Zoo recipes by name, canonical artifacts pinned by hash, and loading any model reference.

A model reference is one of: a zoo name (`arith-s`), a local folder holding a HF checkpoint, or a
HF hub id (`Qwen/Qwen2.5-0.5B-Instruct`). All three end in the same `from_pretrained` call, so a
GPU user swaps a tiny zoo model for a real one by changing one string.

A zoo name that a task uses loads its canonical artifact, shipped in the package
(`rlbench/models/canonical/NAME/`) and pinned by the sha256 of every file in `pins.json`: a
benchmark's base models are part of its definition, and a build on another CPU is another model
(measured: arith-s at 16.5%, 23.4% and 38.6% test pass@1 on three machines). Every load checks the
hash, so every machine, node and Ray worker scores the same bytes. `build` stays, for new recipes
(cached under RLBENCH_HOME by recipe hash) and to say whether this machine reproduces a pin.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import stat
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable

from rlbench.config.core import ConfigError, load_config, to_dict
from rlbench.io import atomic_write_json, file_lock, read_json
from rlbench.models.recipe import ModelRecipe, recipe_hash
from rlbench.paths import models_root
from rlbench.progress import info

if TYPE_CHECKING:
    from rlbench.tasks.spec import TaskConfig

RECIPES_DIR = Path(__file__).parent / "recipes"
CANONICAL_DIR = Path(__file__).parent / "canonical"
PINS_FILE = CANONICAL_DIR / "pins.json"
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
    return artifact_sha256(folder)[:24]


def artifact_sha256(folder: Path) -> str:
    """The full sha256 behind `files_hash`: what a canonical artifact is pinned by."""
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
    return h.hexdigest()


class BuildFailed(ConfigError):
    """A build that did not learn or missed its calibration target: never cached, never used."""


@dataclass(frozen=True)
class Pin:
    """One canonical artifact as pins.json records it."""

    name: str
    sha256: str  # every file of the artifact (artifact_sha256): what a load checks
    weights_hash: str  # weights, tokenizer and config (weights_hash): what a rebuild is compared by
    recipe_hash: str  # the recipe it was built from: a changed recipe needs a new pin
    bytes: int
    parameters: int
    steps: int


def pins() -> dict[str, Pin]:
    if not PINS_FILE.is_file():
        return {}
    return {name: Pin(name=name, **row) for name, row in read_json(PINS_FILE).items()}


def canonical_dir(name: str) -> Path:
    return CANONICAL_DIR / name


_verified: dict[str, tuple[Any, ...]] = {}  # name -> the (size, mtime) of each file when it last hashed right


def _stamp(folder: Path) -> tuple[Any, ...]:
    return tuple(sorted((p.name, p.stat().st_size, p.stat().st_mtime_ns) for p in folder.iterdir()))


def verify_canonical(name: str) -> Path:
    """The canonical artifact's folder, after checking it is the pinned bytes from the current
    recipe; ConfigError naming both hashes when not. Hashed once per process while its files
    stay as they were (a few MB: milliseconds)."""
    pin = pins().get(name)
    if pin is None:
        raise ConfigError(f"zoo model '{name}' has no canonical artifact; pinned: {', '.join(sorted(pins())) or 'none'}")
    folder = canonical_dir(name)
    if not (folder / "config.json").is_file():
        raise ConfigError(f"canonical model '{name}' is missing from {folder}: reinstall rlbench (the artifact "
                          "ships with the package)")
    current = recipe_hash(load_recipe(name))
    if current != pin.recipe_hash:
        raise ConfigError(f"recipe '{name}' changed since its canonical artifact was pinned (recipe hash {current}, "
                          f"pinned {pin.recipe_hash}): build it and pin the build with `rlbench models pin {name}`")
    stamp = _stamp(folder)
    if _verified.get(name) != stamp:
        got = artifact_sha256(folder)
        if got != pin.sha256:
            raise ConfigError(f"canonical model '{name}' at {folder} has sha256 {got}, pinned {pin.sha256}: its files "
                              "were changed or corrupted; restore them (git checkout, or reinstall rlbench)")
        _verified[name] = stamp
    return folder


def pin(name: str, folder: Path) -> Pin:
    """Make the build in `folder` the canonical artifact of `name` and record its hashes. For a
    maintainer changing a base model: every task on it must then be revalidated, and its version
    bumped."""
    meta = model_meta(folder)
    recipe = load_recipe(name)
    if meta is None or meta.get("recipe_hash") != recipe_hash(recipe):
        raise ConfigError(f"{folder} is not a build of the current recipe '{name}' ({recipe_hash(recipe)})")
    target = canonical_dir(name)
    tmp = target.with_name(target.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(folder, tmp, symlinks=False)
    for f in tmp.iterdir():  # as a git checkout has them: readable by the sandbox's uid too
        f.chmod(0o644)
    tmp.chmod(0o755)
    shutil.rmtree(target, ignore_errors=True)
    tmp.rename(target)
    row = Pin(name=name, sha256=artifact_sha256(target), weights_hash=weights_hash(target),
              recipe_hash=meta["recipe_hash"], bytes=sum(p.stat().st_size for p in target.iterdir()),
              parameters=int(meta["parameters"]), steps=int(meta["pretrain"]["steps"]))
    table = {n: {k: v for k, v in vars(p).items() if k != "name"} for n, p in pins().items()}
    table[name] = {k: v for k, v in vars(row).items() if k != "name"}
    atomic_write_json(PINS_FILE, dict(sorted(table.items())))
    PINS_FILE.chmod(0o644)
    _verified.pop(name, None)
    return row


def build(recipe: ModelRecipe, force: bool = False) -> Path:
    """Pretrain `recipe` and save it with `save_pretrained`, unless an identical build exists.

    Written to a temporary folder and renamed, so a crash mid-build leaves nothing that looks
    finished; a lock keeps two processes from building the same recipe at once. A build whose
    loss did not fall or that missed its calibration target raises BuildFailed and is not kept.
    """
    from transformers.utils import logging as hf_logging

    from rlbench.models.pretrain import pretrain
    from rlbench.models.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer

    hf_logging.disable_progress_bar()  # our own progress output is enough

    target = build_dir(recipe)
    with file_lock(target.with_name(target.name + ".lock")):
        if is_built(recipe) and not force:
            return target
        info(f"building model [bold]{recipe.name}[/] ({recipe_hash(recipe)}) into {target}")
        started = time.monotonic()
        tokenizer = build_char_tokenizer(recipe.alphabet or DEFAULT_ALPHABET)
        model, log = pretrain(recipe, tokenizer)
        failure = log.failure(recipe.pretrain)
        if failure:
            raise BuildFailed(f"the build of {recipe.name} ({recipe_hash(recipe)}) failed and was not kept: {failure}")
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
                         "first_loss": round(log.first_loss, 4), "curve": log.curve},
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
    location: str  # the local folder `from_pretrained` receives (a hub model's: its fetched snapshot)
    kind: str  # zoo | local | hub


def prompt_base_dir(task: "TaskConfig") -> Path | None:
    """The folder of the base model a task's prompts are rendered with (its chat template;
    rlbench/data/prompts.py), or None when its prompts need no model."""
    return Path(resolve_model(task.model.base).location) if task.prompt.chat else None


def resolve_model(ref: str, build_missing: bool = True) -> ResolvedModel:
    """Turn a model reference into the folder `from_pretrained` loads: a pinned zoo name its
    verified canonical artifact (never a local build), any other recipe its build (made on
    demand), a hub id (`owner/name[@revision]`) its snapshot fetched once into RLBENCH_HOME
    (rlbench/models/hub.py)."""
    if ref in pins():
        return ResolvedModel(ref, str(verify_canonical(ref)), "zoo")
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
    from rlbench.models.hub import fetch, parse_hub_id

    hub = parse_hub_id(ref)
    if hub is not None:
        return ResolvedModel(ref, str(fetch(*hub)), "hub")
    raise ConfigError(
        f"model '{ref}' is neither a zoo recipe ({', '.join(recipe_names())}), an existing folder, "
        "nor a hub id of the form owner/name[@revision]"
    )


def model_identity(ref: str) -> str:
    """What a result names its base by: the weights hash of the folder it loads (the same for a
    zoo name on every machine, since it loads the pinned artifact; for a hub id, the bytes of the
    snapshot fetched, so two revisions are two bases)."""
    return weights_hash(Path(resolve_model(ref).location))


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
        raise ConfigError(f"cannot load model '{ref}' from {resolved.location}: {exc}") from exc
    if tokenizer.pad_token_id is None:
        tokenizer.pad_token = tokenizer.eos_token
    tokenizer.padding_side = "left"
    model.to(device)
    model.eval()
    from rlbench.engines.hf_generate import harness_generation

    harness_generation(model)  # the checkpoint's generation_config.json never steers the harness's sampling
    return model, tokenizer, resolved
