"""Batched sampling with HF transformers `generate`: the backend that is always available.

Deterministic by construction: each batch draws from its own generator seeded by
(seed, batch index), so a result does not depend on what ran before it in the process.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterator, Sequence

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase


@dataclass
class Completion:
    prompt_index: int
    token_ids: list[int]
    text: str
    logprobs: list[float] = field(default_factory=list)


def _batches(n: int, size: int) -> Iterator[tuple[int, range]]:
    for b, start in enumerate(range(0, n, size)):
        yield b, range(start, min(start + size, n))


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    n: int = 1,
    temperature: float = 1.0,
    top_p: float = 1.0,
    max_new_tokens: int = 16,
    seed: int = 0,
    greedy: bool = False,
    batch_size: int = 256,
    with_logprobs: bool = False,
    on_batch=None,
) -> list[list[Completion]]:
    """`n` completions per prompt; `greedy` ignores temperature, top_p and n (one each)."""
    model.eval()
    device = next(model.parameters()).device
    per_prompt = 1 if greedy else n
    out: list[list[Completion]] = [[] for _ in prompts]
    eos = tokenizer.eos_token_id
    for b, idx in _batches(len(prompts), batch_size):
        enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, padding_side="left")
        enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        torch.manual_seed(seed * 1_000_003 + b)
        kwargs = dict(
            max_new_tokens=max_new_tokens,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=eos,
            return_dict_in_generate=True,
            output_scores=with_logprobs,
        )
        if greedy:
            kwargs.update(do_sample=False)
        else:
            kwargs.update(do_sample=True, temperature=temperature, top_p=top_p, top_k=0,
                          num_return_sequences=per_prompt)
        res = model.generate(**enc, **kwargs)
        seqs = res.sequences[:, enc["input_ids"].shape[1]:]
        logps = None
        if with_logprobs:
            logps = model.compute_transition_scores(res.sequences, res.scores, normalize_logits=True)
        for row in range(seqs.shape[0]):
            p = idx[row // per_prompt]
            ids = seqs[row].tolist()
            cut = ids.index(eos) if eos in ids else len(ids)
            ids = ids[:cut]
            lp = logps[row, :cut].tolist() if logps is not None else []
            out[p].append(Completion(p, ids, tokenizer.decode(ids, skip_special_tokens=True), lp))
        if on_batch is not None:
            on_batch(len(idx))
    return out
