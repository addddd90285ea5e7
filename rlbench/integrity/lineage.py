"""Does a submitted checkpoint descend from the assigned base model?

A checkpoint that loads, has the base's tokenizer and architecture family, and finite weights can
still be the wrong model: freshly initialised, trained from scratch, or another zoo model swapped
in. Fine-tuning moves weights a short way from where it started, so the check is a distance in
parameter space: the relative L2 distance to the base over every parameter (the same names and
shapes are required), refused past `MAX_DRIFT`, and refused when another zoo model of the same
shapes lies closer than the base does.

`MAX_DRIFT` is set from measurements on this suite's validation runs (weight matrices only): the
reference agents' GRPO, PPO, DPO and tool-use checkpoints lie 0.019-0.139 from their base
(arith-grpo and debug-grpo 0.074-0.076, tool-calc 0.136-0.139), a fresh initialisation of the same
config 0.86 (arith-tiny) to 0.99 (the S models); 0.5 is over three times the largest drift
measured and well short of a fresh model.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

MAX_DRIFT = 0.5
PREFIX = "lineage: "  # refusal reasons start so; the integrity section counts them


@dataclass
class Lineage:
    ok: bool
    reason: str = ""
    drift: float = float("nan")  # relative distance to the base
    nearest_other: dict[str, Any] = field(default_factory=dict)  # {"model": name, "distance": d} when closer

    def summary(self) -> dict[str, Any]:
        return {"ok": self.ok, "drift": None if math.isnan(self.drift) else round(self.drift, 5),
                "reason": self.reason, **({"nearest_other": self.nearest_other} if self.nearest_other else {})}


def _state(model: Any) -> dict[str, Any]:
    """The weight matrices (embeddings, projections): norms and biases start equal in a fresh
    model and would hide the distance, so vectors are left out."""
    return {k: v.detach().float() for k, v in model.state_dict().items() if v.is_floating_point() and v.dim() >= 2}


def relative_distance(a: dict[str, Any], b: dict[str, Any]) -> float:
    """||a - b|| / ||b|| over every tensor both hold (shapes already checked equal)."""
    num = den = 0.0
    for name, ref in b.items():
        num += float(((a[name] - ref) ** 2).sum())
        den += float((ref ** 2).sum())
    return math.sqrt(num / den) if den > 0 else float("inf")


def shape_mismatch(a: dict[str, Any], b: dict[str, Any]) -> str:
    missing = sorted(set(b) - set(a))
    if missing:
        return f"weights missing from the checkpoint: {', '.join(missing[:3])}{' ...' if len(missing) > 3 else ''}"
    for name, ref in b.items():
        if tuple(a[name].shape) != tuple(ref.shape):
            return f"weight '{name}' has shape {tuple(a[name].shape)}, the base model's has {tuple(ref.shape)}"
    return ""


def _same_shapes(state: dict[str, Any], folder: Path) -> bool:
    """From the safetensors headers alone (no weights read): every matrix of `state` is in the
    folder's checkpoint with the same shape. A folder without safetensors files is loaded instead."""
    from safetensors import safe_open

    files = sorted(Path(folder).glob("*.safetensors"))
    if not files:
        return not shape_mismatch(state, _load_state(folder))
    shapes: dict[str, tuple[int, ...]] = {}
    for f in files:
        with safe_open(str(f), "pt") as fh:
            shapes.update({k: tuple(fh.get_slice(k).get_shape()) for k in fh.keys()})
    # a tied output head is saved once: only the names both hold are compared, and most must be
    common = [k for k in state if k in shapes]
    return len(common) >= len(state) // 2 and all(tuple(state[k].shape) == shapes[k] for k in common)


def _load_state(path: Path) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    return _state(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32))


def check_lineage(model: Any, base_model: Path, others: Iterable[tuple[str, Path]] = ()) -> Lineage:
    """`model` (loaded) against the base at `base_model`; `others`: (name, folder) of zoo models
    it must not be closer to."""
    sub, base = _state(model), _load_state(Path(base_model))
    bad = shape_mismatch(sub, base)
    if bad:
        return Lineage(False, f"{PREFIX}not the assigned base model's shape: {bad}")
    drift = relative_distance(sub, base)
    if not drift <= MAX_DRIFT:
        return Lineage(False, f"{PREFIX}the weights lie {drift:.2f} (relative L2) from the assigned base model, past the "
                              f"limit of {MAX_DRIFT}: a freshly initialised, retrained or swapped model, not the base "
                              "fine-tuned", drift)
    for name, folder in others:
        if not _same_shapes(sub, folder):
            continue  # another architecture or size: it cannot be the submission's origin
        d = relative_distance(sub, _load_state(folder))
        if d < drift:
            return Lineage(False, f"{PREFIX}the weights are closer to zoo model '{name}' ({d:.3f}) than to the assigned base "
                                  f"model ({drift:.3f}): a swapped model", drift, {"model": name, "distance": round(d, 5)})
    return Lineage(True, "", drift)


def zoo_neighbours(base_model: Path) -> list[tuple[str, Path]]:
    """Built zoo models other than the base (by folder), the candidates a swapped model comes from."""
    from rlbench.models.zoo import META_FILE
    from rlbench.paths import models_root

    root = models_root()
    base = Path(base_model).resolve()
    if not root.is_dir():
        return []
    return [(d.name.rsplit("-", 1)[0], d) for d in sorted(root.iterdir())
            if (d / META_FILE).is_file() and d.resolve() != base]
