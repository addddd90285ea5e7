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

The global drift leaves vectors out, and a small tensor hides in it anyway: multiplying the final
norm's gains by 8 moves no matrix and only sharpens the sampling distribution (a lower
temperature), for a sampled gain without any training. So every floating tensor, vectors
included, must also stay within a per-tensor relative distance of its base counterpart:
`MAX_VECTOR_DRIFT` for vectors, `MAX_MATRIX_DRIFT` for matrices. Measured 2026-12-04 on reference
pipeline checkpoints (max per-tensor drift, vectors / matrices; global drift):
  arith-s (arith-grpo): GRPO 500 steps (the reference agent's settings) 0.048 / 0.304 (0.106),
    SFT 300 steps 0.042 / 0.399 (0.258), DPO 150 steps 0.010 / 0.142 (0.066);
  calc-s (tool-calc): GRPO 500 steps 0.006 / 0.100 (0.055);
  arith-tiny: GRPO 500 0.005 / 0.180, PPO 300 0.010 / 0.209, DPO 150 0.011 / 0.277;
  pushed to the global limit: SFT on arith-s, 1500 steps at lr 1e-3, 0.154 / 0.709 (0.521, refused).
The largest vector drift is the final norm's in every arith-s run. A x2 scaling of any tensor is a
drift of 1.0, x8 is 7.0. Vectors move about ten times less than matrices, so they get the tighter
limit: 0.35 is seven times the reference runs' 0.048 and twice the 0.154 of a run at the global
limit, and caps a norm's sharpening at x1.35; 0.75 is nearly twice the matrices' 0.40 at reference
settings and refuses a doubled matrix. A smaller rescaling that passes is left to the
sampling-only flag (rlbench/evaluation/gain.py). config.json must equal the base's beyond
bookkeeping (`config_changes`): the same weights under another configuration compute other numbers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable

MAX_DRIFT = 0.5
MAX_VECTOR_DRIFT = 0.35  # per tensor: norm gains, biases (measured above)
MAX_MATRIX_DRIFT = 0.75  # per tensor: embeddings, projections (measured above)
TENSOR_FLOOR = 0.01  # RMS per element under which a base tensor counts as this size (see tensor_drifts)
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


def _tensors(model: Any) -> dict[str, Any]:
    """Every floating tensor of the model, vectors (norms, biases) included, in float32."""
    return {k: v.detach().float() for k, v in model.state_dict().items() if v.is_floating_point()}


def _matrices(state: dict[str, Any]) -> dict[str, Any]:
    """The weight matrices (embeddings, projections), for the global drift: norms and biases
    start equal in a fresh model and would hide the distance, so vectors are left out."""
    return {k: v for k, v in state.items() if v.dim() >= 2}


def _state(model: Any) -> dict[str, Any]:
    return _matrices(_tensors(model))


def tensor_drifts(a: dict[str, Any], b: dict[str, Any]) -> dict[str, float]:
    """Per tensor: ||a - b|| / ||b||, the denominator floored at an RMS of `TENSOR_FLOOR` per
    element, so a tensor that is near zero in the base (a zero-initialised bias) is not refused
    for any movement at all."""
    out = {}
    for name, ref in b.items():
        den = max(float(ref.norm()), TENSOR_FLOOR * math.sqrt(max(1, ref.numel())))
        out[name] = float((a[name] - ref).norm()) / den
    return out


def tensor_limit(t: Any) -> float:
    """A vector's limit (norm gains, biases move far less in training than matrices do), or a matrix's."""
    return MAX_VECTOR_DRIFT if t.dim() < 2 else MAX_MATRIX_DRIFT


def worst_tensor(a: dict[str, Any], b: dict[str, Any]) -> tuple[str, float, float]:
    """(name, drift, limit) of the tensor furthest past (or nearest to) its per-tensor limit."""
    drifts = tensor_drifts(a, b)
    if not drifts:
        return "", 0.0, MAX_MATRIX_DRIFT
    name = max(drifts, key=lambda k: drifts[k] / tensor_limit(b[k]))
    return name, drifts[name], tensor_limit(b[name])


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


def _load_state(path: Path, vectors: bool = False) -> dict[str, Any]:
    import torch
    from transformers import AutoModelForCausalLM

    tensors = _tensors(AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32))
    return tensors if vectors else _matrices(tensors)


def check_lineage(model: Any, base_model: Path, others: Iterable[tuple[str, Path]] = ()) -> Lineage:
    """`model` (loaded) against the base at `base_model`; `others`: (name, folder) of zoo models
    it must not be closer to."""
    every, base_every = _tensors(model), _load_state(Path(base_model), vectors=True)
    bad = shape_mismatch(every, base_every)
    if bad:
        return Lineage(False, f"{PREFIX}not the assigned base model's shape: {bad}")
    sub, base = _matrices(every), _matrices(base_every)
    drift = relative_distance(sub, base)
    if not drift <= MAX_DRIFT:
        return Lineage(False, f"{PREFIX}the weights lie {drift:.2f} (relative L2) from the assigned base model, past the "
                              f"limit of {MAX_DRIFT}: a freshly initialised, retrained or swapped model, not the base "
                              "fine-tuned", drift)
    for name, folder in others:  # a swapped model is named as such before its tensors are judged one by one
        if not _same_shapes(sub, folder):
            continue  # another architecture or size: it cannot be the submission's origin
        d = relative_distance(sub, _load_state(folder))
        if d < drift:
            return Lineage(False, f"{PREFIX}the weights are closer to zoo model '{name}' ({d:.3f}) than to the assigned base "
                                  f"model ({drift:.3f}): a swapped model", drift, {"model": name, "distance": round(d, 5)})
    name, moved, limit = worst_tensor(every, base_every)
    if not moved <= limit:
        return Lineage(False, f"{PREFIX}weight '{name}' lies {moved:.2f} (relative L2) from the base model's, past the "
                              f"per-tensor limit of {limit}: one tensor rescaled or replaced (a scaled final norm only "
                              "sharpens sampling), not the base fine-tuned", drift)
    return Lineage(True, "", drift)


# config.json keys that are bookkeeping or runtime switches: they change no number the model computes
CONFIG_FREE = frozenset({"_name_or_path", "transformers_version", "dtype", "torch_dtype", "use_cache", "architectures",
                         "output_attentions", "output_hidden_states", "return_dict"})


def config_changes(config: Any, base_config: Any) -> str:
    """The config.json settings (beyond bookkeeping) that differ from the base model's, '' when
    none: the same weights under another norm epsilon, rope or logit scaling compute other
    numbers, so only the weights may change, and they answer to the lineage check."""
    a, b = config.to_dict(), base_config.to_dict()
    changed = sorted(k for k in set(a) | set(b) if k not in CONFIG_FREE and a.get(k) != b.get(k))
    return ", ".join(f"'{k}' ({a.get(k)!r}, the base model's {b.get(k)!r})"[:120] for k in changed[:3]) + \
        (" ..." if len(changed) > 3 else "")


def zoo_neighbours(base_model: Path) -> list[tuple[str, Path]]:
    """Zoo models other than the base (by folder), the candidates a swapped model comes from: the
    canonical artifacts every installation has, and this machine's local builds."""
    from rlbench.models.zoo import CANONICAL_DIR, META_FILE, pins
    from rlbench.paths import models_root

    base = Path(base_model).resolve()
    found = [(name, CANONICAL_DIR / name) for name in sorted(pins())]
    root = models_root()
    if root.is_dir():
        found += [(d.name.rsplit("-", 1)[0], d) for d in sorted(root.iterdir()) if (d / META_FILE).is_file()]
    return [(name, d) for name, d in found if (d / "config.json").is_file() and d.resolve() != base]
