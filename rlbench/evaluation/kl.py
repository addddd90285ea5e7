"""KL(trained || base) on a task's prompts, measured by the harness for KL-constrained tasks.

The estimate is the Monte Carlo one: sample completions from the trained model under the task's
protocol, and average log p_trained(y|x) - log p_base(y|x) over them (summed over tokens, the
stopping EOS included). It is unbiased for the sequence-level KL, and per prompt it is what the
interval is taken over. Both models score the same token ids, so they must share a tokenizer.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from rlbench.engines.hf_generate import generate
from rlbench.evaluation.stats import mean_ci
from rlbench.models.zoo import load_model


@torch.no_grad()
def _sequence_logprobs(model: Any, rows: list[list[int]], starts: list[int], pad: int) -> list[float]:
    width = max(len(r) for r in rows)
    ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
    logits = model(input_ids=ids, attention_mask=attn).logits[:, :-1].float()
    logp = torch.log_softmax(logits, -1).gather(-1, ids[:, 1:].unsqueeze(-1)).squeeze(-1)
    out = []
    for i, r in enumerate(rows):
        out.append(float(logp[i, starts[i] - 1: len(r) - 1].sum()))
    return out


def kl_to_base(checkpoint: str, base: str, task: Any, items: Sequence[dict[str, Any]], samples: int = 2,
               batch: int = 128, device: str = "cpu") -> dict[str, Any]:
    """Mean per-prompt KL in nats with a 95% interval over prompts."""
    model, tok, _ = load_model(checkpoint, device=device)
    ref, ref_tok, _ = load_model(base, device=device)
    if tok.get_vocab() != ref_tok.get_vocab():
        raise ValueError("KL needs the trained and the base model to share a tokenizer")
    proto = task.eval
    prompts = [it["prompt"] for it in items]
    comps = generate(model, tok, prompts, n=samples, temperature=proto.temperature, top_p=proto.top_p,
                     max_new_tokens=proto.max_new_tokens, seed=proto.seed + 7, batch_size=max(1, batch // samples))
    rows, starts, owner = [], [], []
    for p, (prompt, cs) in enumerate(zip(prompts, comps)):
        p_ids = tok(prompt)["input_ids"]
        for c in cs:
            tail = list(c.token_ids) + ([tok.eos_token_id] if len(c.token_ids) < proto.max_new_tokens else [])
            rows.append(p_ids + tail)
            starts.append(len(p_ids))
            owner.append(p)
    per_prompt = [0.0] * len(prompts)
    for s in range(0, len(rows), batch):
        r, st = rows[s:s + batch], starts[s:s + batch]
        new = _sequence_logprobs(model, r, st, tok.pad_token_id)
        old = _sequence_logprobs(ref, r, st, tok.pad_token_id)
        for k, (a, b) in enumerate(zip(new, old)):
            per_prompt[owner[s + k]] += (a - b) / samples
    mean, lo, hi = mean_ci(per_prompt, clamp=False)
    return {"kl": mean, "ci_low": lo, "ci_high": hi, "n": len(prompts), "samples_per_prompt": samples}
