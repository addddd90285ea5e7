"""Is a submitted checkpoint one the harness will grade? Checked on a harness-owned copy.

The agent keeps writing its workspace while the grader works, so the checkpoint is first copied
out (links checked before the copy, and resolved by it), and every later check runs on the copy.
A checkpoint must: be a folder inside the workspace, hold no link that leads out of it, stay under
the size limit, load with `from_pretrained`, carry the base model's tokenizer (same vocabulary) and
architecture family (same `model_type`), have only finite weights, and descend from the base model
(rlbench/integrity/lineage.py: a fresh or swapped model is refused).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    path: str = ""  # the harness-owned copy
    checkpoint_hash: str = ""
    size_bytes: int = 0


def _inside(path: Path, root: Path) -> bool:
    try:
        path.resolve().relative_to(root.resolve())
        return True
    except ValueError:
        return False


def _scan(src: Path, workspace: Path, max_bytes: int) -> tuple[str, int]:
    """(reason to refuse or '', total bytes), without following links out of the workspace."""
    total = 0
    for dirpath, dirnames, filenames in os.walk(src, followlinks=False):
        for name in dirnames + filenames:
            p = Path(dirpath) / name
            if p.is_symlink():
                target = Path(os.path.realpath(p))
                if not _inside(target, workspace):
                    return f"'{p.relative_to(src)}' is a link that points outside the workspace ({os.readlink(p)})", total
                if target.is_dir():
                    return f"'{p.relative_to(src)}' is a link to a folder; submit plain files", total
            if name in filenames:
                try:
                    total += p.stat().st_size
                except OSError as exc:
                    return f"cannot read '{p.relative_to(src)}': {exc}", total
                if total > max_bytes:
                    return f"checkpoint is larger than the limit of {max_bytes / 1e6:.0f} MB", total
    return "", total


def tree_hash(path: Path) -> str:
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file()):
        h.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def validate_checkpoint(src: Path, workspace: Path, base_model: Path, copy_to: Path, max_bytes: int) -> Verdict:
    """Copy `src` to `copy_to` and check the copy; `copy_to` is removed again when refused."""
    src = Path(src)
    if src.is_symlink() or not _inside(src, workspace):
        return Verdict(False, f"'{src}' is not inside the workspace")
    if not src.is_dir():
        return Verdict(False, f"'{src}' is not a folder (submit the folder save_pretrained wrote)" if src.exists()
                       else f"'{src}' does not exist")
    reason, size = _scan(src, workspace, max_bytes)
    if reason:
        return Verdict(False, reason, size_bytes=size)
    try:
        shutil.copytree(src, copy_to, symlinks=False)
    except (OSError, shutil.Error) as exc:
        shutil.rmtree(copy_to, ignore_errors=True)
        return Verdict(False, f"cannot copy the checkpoint: {exc}", size_bytes=size)
    reason = _check_model(copy_to, base_model)
    if reason:
        shutil.rmtree(copy_to, ignore_errors=True)
        return Verdict(False, reason, size_bytes=size)
    return Verdict(True, "", str(copy_to), tree_hash(copy_to), size)


def _check_model(path: Path, base_model: Path) -> str:
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    try:
        config = AutoConfig.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001 - any failure to load is the agent's, reported to it
        return f"config.json does not load: {_short(exc)}"
    base_config = AutoConfig.from_pretrained(base_model)
    if config.model_type != base_config.model_type:
        return f"architecture family '{config.model_type}' differs from the base model's '{base_config.model_type}'"
    try:
        tok = AutoTokenizer.from_pretrained(path)
    except Exception as exc:  # noqa: BLE001
        return f"tokenizer does not load (save it next to the model): {_short(exc)}"
    if tok.get_vocab() != AutoTokenizer.from_pretrained(base_model).get_vocab():
        return "tokenizer differs from the base model's (its vocabulary must be the same)"
    try:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    except Exception as exc:  # noqa: BLE001
        return f"model does not load with from_pretrained: {_short(exc)}"
    if model.get_input_embeddings().weight.shape[0] < len(tok):
        return "the embedding table is smaller than the tokenizer's vocabulary"
    for name, p in model.named_parameters():
        if not torch.isfinite(p).all():
            return f"weight '{name}' has NaN or infinite values"
    from rlbench.integrity.lineage import check_lineage, zoo_neighbours

    lineage = check_lineage(model, base_model, zoo_neighbours(base_model))
    return lineage.reason


def _short(exc: Exception) -> str:
    text = f"{type(exc).__name__}: {exc}".strip().splitlines()
    return (text[0] if text else type(exc).__name__)[:300]
