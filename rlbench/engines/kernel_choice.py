"""Pick the training precision and attention kernel by measuring them on this machine.

A fixed rule ("bf16 and eager attention where the CPU has native bf16") was tuned on one Intel
Xeon with AMX, and from outside it did not hold: on an AMD EPYC (AVX-512 BF16, no AMX) our bf16
GRPO step measured 0.16x TRL's in one run. Which kernel wins depends on the CPU, the model's shape,
the batch and the thread count, so `precision=measure` / `attention=measure` time each candidate on
the model's own architecture (random weights: the speed of a kernel does not depend on the values)
with a learner-shaped batch (prompts and their groups' completions packed as the learner packs
them, `shared_prefix_logprobs`), forward and backward, candidates interleaved (ABAB...) so that a load
change on the machine hits all of them alike, and keep the fastest median.

It is opt-in (`auto` is the fixed rule, the default): candidates within a few percent of each other
are ranked by noise, so two workspaces can pick differently, and a recipe rerun with another
kernel does not reproduce its checkpoint bit for bit. Only training asks for it (the learner, and
the rollout engine that shares its weights); the harness scores every checkpoint in fp32 with the
rule, so a measurement never changes a grade. The result is cached under RLBENCH_HOME by everything
that can change it (CPU, flags, torch version, threads, model config, candidates, batch), so a
machine pays for it once: a second or two on the zoo's S and M models.
"""

from __future__ import annotations

import copy
import hashlib
import json
import statistics
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import torch

from rlbench.io import atomic_write_json, file_lock, read_json
from rlbench.paths import home

ROWS, TOKENS = 32, 16  # a quarter of an S/M learner batch (128 rows of ~11 tokens): the probe stays short
GROUP = 8  # completions per prompt in the probe's batch, run the way the learner runs them
BIG_ROWS = 4  # above BIG_PARAMS the probe keeps its batch small: it must stay a short measurement
# the learner's batch layout the probe times: packed group rows with a 4D mask since 2026-12-07
# (SDPA takes another kernel with an explicit mask than with a causal flag, so older cached choices
# measured something else)
PROBE = "packed-group-rows"
BIG_PARAMS = 50_000_000
CPU_FLAGS = ("avx512f", "avx512_bf16", "amx_bf16", "amx_tile", "avx2")


@dataclass(frozen=True)
class KernelChoice:
    """What a training engine computes with, and why: `seconds` holds each measured candidate's
    median seconds for one forward + backward (empty when nothing was measured)."""
    precision: str  # fp32 | bf16
    attention: str  # eager | sdpa
    source: str  # given | rule | measured | cached
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def dtype(self) -> torch.dtype:
        return torch.bfloat16 if self.precision == "bf16" else torch.float32


def cpu_identity() -> str:
    """Model name and the flags that decide bf16 kernels: the cache's notion of 'this machine'."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return "unknown"
    name = next((line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("model name")), "unknown")
    flags = next((line.split(":", 1)[1].split() for line in text.splitlines() if line.startswith("flags")), [])
    return f"{name} [{' '.join(f for f in CPU_FLAGS if f in flags)}]"


def _candidates(precision: str, attention: str) -> list[tuple[str, str]]:
    """Every (precision, attention) to time; a value that is not `measure` follows the rule."""
    from rlbench.engines.precision import resolve_attention, resolve_dtype

    precisions = ["fp32", "bf16"] if precision == "measure" else [
        "bf16" if resolve_dtype(precision, "cpu") == torch.bfloat16 else "fp32"]
    out = []
    for p in precisions:
        dtype = torch.bfloat16 if p == "bf16" else torch.float32
        out += [(p, a) for a in (["sdpa", "eager"] if attention == "measure" else
                                  [resolve_attention(attention, dtype, "cpu")])]
    return out


def _candidate_models(model_path: str, candidates: list[tuple[str, str]]) -> dict[str, tuple[Any, tuple]]:
    """Per candidate "precision/attention": a randomly initialised model of `model_path`'s
    architecture in that precision and kernel, and a learner-shaped batch for it."""
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(model_path)
    out = {}
    for precision, attention in candidates:
        torch.manual_seed(0)
        # a config of its own: from_config sets the attention kernel on the config object, so a
        # shared one switched every earlier candidate to the last one's kernel (measured: the probe
        # then timed eager against eager)
        net = AutoModelForCausalLM.from_config(copy.deepcopy(config), attn_implementation=attention)
        net = net.to(torch.bfloat16 if precision == "bf16" else torch.float32).train()
        rows = ROWS if sum(p.numel() for p in net.parameters()) < BIG_PARAMS else BIG_ROWS
        group = min(GROUP, rows)
        gen = torch.Generator().manual_seed(0)
        half = TOKENS // 2  # prompt and completion halves, completions of 1..half real tokens
        prompts = torch.randint(0, config.vocab_size, (rows // group, half), generator=gen)
        completions = torch.randint(0, config.vocab_size, (rows // group * group, half), generator=gen)
        real = torch.arange(half)[None] < torch.randint(1, half + 1, (completions.shape[0], 1), generator=gen)
        out[f"{precision}/{attention}"] = (net, (prompts, torch.ones_like(prompts), completions, real.long(), group))
    return out


def _probe(model_path: str, candidates: list[tuple[str, str]], rounds: int) -> dict[str, float]:
    """Median seconds of one forward + backward per candidate, rounds interleaved."""
    from rlbench.engines.group_rows import shared_prefix_logprobs

    models = _candidate_models(model_path, candidates)
    times: dict[str, list[float]] = {k: [] for k in models}

    def once(key: str) -> float:
        net, batch = models[key]
        net.zero_grad(set_to_none=True)
        t0 = time.perf_counter()
        shared_prefix_logprobs(net, *batch).mean().backward()
        return time.perf_counter() - t0

    for key in models:  # warm-up: first calls allocate and pick oneDNN primitives
        once(key)
    for _ in range(rounds):
        for key in models:
            times[key].append(once(key))
    return {k: statistics.median(v) for k, v in times.items()}


def _cache_path(model_path: str, candidates: list[tuple[str, str]], rounds: int) -> Path:
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(model_path).to_json_string(use_diff=False)
    key = json.dumps([cpu_identity(), torch.__version__, torch.get_num_threads(), config, candidates, ROWS, TOKENS,
                      GROUP, PROBE, rounds], sort_keys=True)
    return home() / "kernels" / f"{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


def rule_choice(precision: str, attention: str, device: str) -> KernelChoice:
    """The fixed rule, for grading (fp32 unless told) and GPUs (bf16 where supported, SDPA)."""
    from rlbench.engines.precision import resolve_attention, resolve_dtype

    dtype = resolve_dtype(precision, device)
    given = precision in ("fp32", "bf16") and attention in ("eager", "sdpa")
    return KernelChoice("bf16" if dtype == torch.bfloat16 else "fp32", resolve_attention(attention, dtype, device),
                        "given" if given else "rule")


def choose_kernels(model_path: str, precision: str = "auto", attention: str = "auto", device: str = "cpu",
                   rounds: int = 3) -> KernelChoice:
    """The training kernels for `model_path`: the fastest measured candidate for what is
    `measure` (CPU only; a GPU keeps the rule), what was asked for or the rule for the rest."""
    if device.startswith("cuda") or "measure" not in (precision, attention):
        return rule_choice(precision, attention, device)
    candidates = _candidates(precision, attention)
    if len(candidates) == 1:
        return rule_choice(precision, attention, device)
    path = _cache_path(model_path, candidates, rounds)
    with file_lock(path.with_suffix(".lock")):
        cached = read_json(path) if path.is_file() else None
        if cached:
            return KernelChoice(**{**cached, "source": "cached"})
        seconds = _probe(model_path, candidates, rounds)
        best = min(seconds, key=seconds.__getitem__)
        choice = KernelChoice(*best.split("/"), source="measured", seconds={k: round(v, 5) for k, v in seconds.items()})
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path, asdict(choice))
    return choice
