"""Is a submitted checkpoint one the harness will grade? Checked on a harness-owned copy.

The agent keeps writing its workspace while the grader works, so the checkpoint is first copied
out (rlbench/safefs.py: no link followed, regular files only, sizes counted while copying), and
every later check runs on the copy. A checkpoint must: be a folder inside the workspace, hold only
plain files and folders (no links, FIFOs, sockets or devices), stay under the size and file-count
limits, load with `from_pretrained`, carry the base model's tokenizer (same vocabulary) and
architecture family (same `model_type`), have only finite weights, and descend from the base model
(rlbench/integrity/lineage.py: a fresh or swapped model is refused).
"""

from __future__ import annotations

import hashlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from rlbench import safefs

MAX_FILES = 1000  # a Hugging Face checkpoint folder holds a dozen; sharded large models some hundreds


@dataclass
class Verdict:
    ok: bool
    reason: str = ""
    path: str = ""  # the harness-owned copy
    checkpoint_hash: str = ""
    size_bytes: int = 0


def tree_hash(path: Path) -> str:
    """Every file of a harness-owned copy, names and bytes (a copy holds regular files only)."""
    h = hashlib.sha256()
    for file in sorted(p for p in path.rglob("*") if p.is_file() and not p.is_symlink()):
        h.update(str(file.relative_to(path)).encode())
        with open(file, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()[:16]


def validate_checkpoint(src: Path, workspace: Path, base_model: Path, copy_to: Path, max_bytes: int,
                        max_files: int = MAX_FILES) -> Verdict:
    """Copy `src` to `copy_to` and check the copy; `copy_to` is removed again when refused.

    Copy first, then validate: the copy takes regular files and folders only, reached without
    following any link (a link anywhere refuses the checkpoint), counting bytes and files as it
    reads, so every later check and the score see exactly the bytes that were copied, whatever the
    agent swaps in the workspace meanwhile."""
    workspace = Path(workspace)
    try:
        rel = safefs.relative_to_root(src, workspace)
    except safefs.UnsafePath:
        return Verdict(False, f"'{src}' is not inside the workspace")
    if rel in ("", "."):
        return Verdict(False, "submit a checkpoint folder inside the workspace, not the workspace itself")
    try:
        size = safefs.copy_tree(workspace, rel, Path(copy_to), max_bytes, max_files)
    except safefs.CopyRefused as exc:
        return Verdict(False, f"checkpoint refused: {exc}")
    except FileNotFoundError:
        return Verdict(False, f"'{src}' does not exist")
    except OSError as exc:
        shutil.rmtree(copy_to, ignore_errors=True)
        return Verdict(False, f"'{src}' cannot be copied: {exc.strerror or exc}")
    reason = merge_adapter(Path(copy_to), base_model) if is_adapter(Path(copy_to)) else ""
    reason = reason or _check_model(Path(copy_to), base_model)
    if reason:
        shutil.rmtree(copy_to, ignore_errors=True)
        return Verdict(False, reason, size_bytes=size)
    return Verdict(True, "", str(copy_to), tree_hash(Path(copy_to)), size)


ADAPTER_DIR = "adapter"  # where a merged adapter's own files stay in the harness's copy, for the record


def is_adapter(path: Path) -> bool:
    """A PEFT adapter checkpoint (adapter_config.json, no config.json of a full model)."""
    return (path / "adapter_config.json").is_file() and not (path / "config.json").exists()


def merge_adapter(path: Path, base_model: Path) -> str:
    """Merge the LoRA adapter in the harness's copy `path` onto the harness's own base model and
    write the merged model (and the base's tokenizer) into `path`, the adapter's files kept under
    `path/adapter/`: from here on it is checked and scored as any full checkpoint. The adapter
    names a base of its own (`base_model_name_or_path`); that is the agent's text and is never
    read: the base is always the task's. '' when merged, else why not."""
    import json

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        cfg = json.loads((path / "adapter_config.json").read_text())
    except (OSError, ValueError) as exc:
        return f"adapter_config.json does not load: {_short(exc)}"
    if not isinstance(cfg, dict) or cfg.get("peft_type") != "LORA":
        return "only LoRA adapters are merged (adapter_config.json's peft_type must be LORA)"
    if not (path / "adapter_model.safetensors").is_file():
        return "an adapter checkpoint needs adapter_model.safetensors (save it with safe_serialization)"
    kept = path / ADAPTER_DIR
    if kept.exists():
        return f"an adapter checkpoint may not hold a '{ADAPTER_DIR}' entry (the harness keeps the adapter's files there)"
    kept.mkdir()
    for f in list(path.iterdir()):
        if f != kept:
            f.rename(kept / f.name)
    cfg["base_model_name_or_path"] = str(base_model)  # the task's base, whatever the adapter says
    (kept / "adapter_config.json").write_text(json.dumps(cfg))
    try:
        from peft import PeftModel

        base = AutoModelForCausalLM.from_pretrained(base_model, dtype=torch.float32)
        merged = PeftModel.from_pretrained(base, str(kept), is_trainable=False).merge_and_unload()
        merged.save_pretrained(str(path), safe_serialization=True)
        AutoTokenizer.from_pretrained(base_model).save_pretrained(str(path))
    except Exception as exc:  # noqa: BLE001 - an adapter that does not fit the base is the agent's
        return f"the LoRA adapter does not merge onto the base model: {_short(exc)}"
    return ""


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
    from rlbench.integrity.lineage import config_changes

    changed = config_changes(config, base_config)
    if changed:  # the same weights under another configuration compute other numbers
        return f"config.json differs from the base model's in {changed}: only the weights may change"
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
