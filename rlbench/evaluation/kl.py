"""KL(trained || base) on a task's prompts, measured by the harness for KL-constrained tasks.

The estimate is the Monte Carlo one: sample completions from the trained model under the task's
protocol, and average log p_trained(y|x) - log p_base(y|x) over them (summed over the tokens the
model chose, the stopping EOS included). It is unbiased for the sequence-level KL, and per prompt
it is what the interval is taken over. On a task with a tool the completions come from the same
tool loop the harness scores with, and the tokens the environment wrote are left out of the sum:
both policies see the same answer to the same call, so those tokens carry no divergence of the
policy, and counting them would charge the model for text it did not choose. Both models score the
same token ids, so they must share a tokenizer.
"""

from __future__ import annotations

from typing import Any, Sequence

import torch

from rlbench.engines.hf_generate import Completion, generate, tool_stop_id
from rlbench.engines.sampling import SamplingParams
from rlbench.envs import tool_args
from rlbench.evaluation.stats import mean_ci
from rlbench.models.zoo import load_model


@torch.no_grad()
def _sequence_logprobs(model: Any, rows: list[list[int]], starts: list[int], masks: list[list[int]],
                       pad: int) -> list[float]:
    """Per row: the sum of log p(token) over the completion's tokens whose mask is 1."""
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
        keep = torch.tensor(masks[i], dtype=torch.bool)
        out.append(float(logp[i, starts[i] - 1: len(r) - 1][keep].sum()))
    return out


def scored_tokens(c: Completion, max_new_tokens: int, eos: int, stop_id: int | None = None) -> tuple[list[int], list[int]]:
    """A completion's token ids as the KL scores them, and which of them the model chose (1) or the
    environment wrote (0). The EOS that ended it is the model's choice too, so it is added unless
    the completion ended otherwise: cut at `max_new_tokens`, or at the tool's stop token once the
    calls ran out."""
    ids = list(c.token_ids)
    mask = list(c.tool_mask) if c.tool_mask else [1] * len(ids)
    if len(mask) != len(ids):
        raise ValueError(f"completion has {len(ids)} tokens but a tool mask of {len(mask)}")
    ended_at_stop = stop_id is not None and bool(ids) and ids[-1] == stop_id and mask[-1] == 1  # the model's call
    if len(ids) < max_new_tokens and not ended_at_stop:
        ids.append(eos)
        mask.append(1)
    return ids, mask


def kl_to_base(checkpoint: str, base: str, task: Any, items: Sequence[dict[str, Any]], samples: int = 2,
               batch: int = 128, device: str = "cpu") -> dict[str, Any]:
    """Mean per-prompt KL in nats with a 95% interval over prompts."""
    model, tok, _ = load_model(checkpoint, device=device)
    ref, ref_tok, _ = load_model(base, device=device)
    if tok.get_vocab() != ref_tok.get_vocab():
        raise ValueError("KL needs the trained and the base model to share a tokenizer")
    proto = task.eval
    tool = tool_args(task)
    stop_id = tool_stop_id(tok, tool["tool"]) if tool else None
    prompts = [it["prompt"] for it in items]
    sampling = SamplingParams(n=samples, temperature=proto.temperature, top_p=proto.top_p,
                              max_new_tokens=proto.max_new_tokens, seed=proto.seed + 7, **tool)
    comps = generate(model, tok, prompts, sampling, batch_size=max(1, batch // samples))
    rows, starts, masks, owner = [], [], [], []
    for p, (prompt, cs) in enumerate(zip(prompts, comps)):
        p_ids = tok(prompt)["input_ids"]
        for c in cs:
            tail, mask = scored_tokens(c, proto.max_new_tokens, tok.eos_token_id, stop_id)
            rows.append(p_ids + tail)
            starts.append(len(p_ids))
            masks.append(mask)
            owner.append(p)
    per_prompt = [0.0] * len(prompts)
    for s in range(0, len(rows), batch):
        r, st, m = rows[s:s + batch], starts[s:s + batch], masks[s:s + batch]
        new = _sequence_logprobs(model, r, st, m, tok.pad_token_id)
        old = _sequence_logprobs(ref, r, st, m, tok.pad_token_id)
        for k, (a, b) in enumerate(zip(new, old)):
            per_prompt[owner[s + k]] += (a - b) / samples
    mean, lo, hi = mean_ci(per_prompt, clamp=False)
    return {"kl": mean, "ci_low": lo, "ci_high": hi, "n": len(prompts), "samples_per_prompt": samples,
            "tool": tool.get("tool", "")}
