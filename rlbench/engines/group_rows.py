"""The learner's forward over GRPO groups: each prompt and its completions packed into one row.

Its own module, below the learner, because the kernel probe (`kernel_choice`) times exactly this
layout and the learner builds on the probe's choice.
"""

from __future__ import annotations

from typing import Any

import torch


def shared_prefix_logprobs(model: Any, prompt_ids: torch.Tensor, prompt_attention: torch.Tensor,
                           completion_ids: torch.Tensor, completion_attention: torch.Tensor, group: int,
                           row_tokens: int = 1024) -> torch.Tensor:
    """log p(completion token j | prompt, completion_<j): shape [P*group, Lc], for `group`
    completions per prompt, with each prompt run once for its group and no padding inside a group.

    GRPO samples 8 or more completions per prompt; on short tasks the prompt is over half of every
    sequence, and completions padded to the longest one in the batch are mostly padding (arith:
    3.5 real tokens of 8). So each row packs one prompt and its completions back to back,
    `[prompt, c_1, c_2, ...]`, and a 4D mask lets a completion's tokens see the prompt and their own
    completion's earlier tokens only; positions restart after the prompt for each completion. A
    group longer than `row_tokens` is split over rows that each repeat the prompt, which bounds the
    [row, row] mask. Prompts are left-padded, completions right-padded (GroupBatch). Equal to
    `token_logprobs` on the concatenated sequences, values and gradients (tested)."""
    device = completion_ids.device
    n, width = completion_ids.shape
    p_len = prompt_attention.long().sum(-1).tolist()
    c_len = completion_attention.long().sum(-1).tolist()
    if min(p_len, default=1) < 1:
        # a completion's first token is predicted at its prompt's last position: there must be one
        raise ValueError(f"prompt {p_len.index(min(p_len))} has no tokens: nothing predicts its completions' first token")
    if completion_ids.shape[0] != len(p_len) * group:
        raise ValueError(f"{completion_ids.shape[0]} completions for {len(p_len)} prompts x group {group}")
    # rows: (prompt index, [completion indices]); a row holds at least one completion
    rows: list[tuple[int, list[int]]] = []
    for i in range(prompt_ids.shape[0]):
        used = p_len[i]
        for j in range(i * group, (i + 1) * group):
            if not rows or rows[-1][0] != i or (used + c_len[j] > row_tokens and rows[-1][1]):
                rows.append((i, []))
                used = p_len[i]
            rows[-1][1].append(j)
            used += c_len[j]
    lengths = [p_len[i] + sum(c_len[j] for j in js) for i, js in rows]
    total = max(lengths)
    ids = torch.zeros((len(rows), total), dtype=torch.long)
    pos = torch.zeros((len(rows), total), dtype=torch.long)
    seg = torch.full((len(rows), total), -2, dtype=torch.long)  # -1 prompt, k completion k, -2 padding
    src_row, src_col, dst_col = [], [], []  # where completion token t of j is predicted: row, column
    for r, (i, js) in enumerate(rows):
        a = p_len[i]
        ids[r, :a] = prompt_ids[i, prompt_ids.shape[1] - a:]
        pos[r, :a] = torch.arange(a)
        seg[r, :a] = -1
        at = a
        for j in js:
            b = c_len[j]
            ids[r, at:at + b] = completion_ids[j, :b]
            pos[r, at:at + b] = torch.arange(a, a + b)
            seg[r, at:at + b] = j
            # token 0 is predicted at the prompt's last position, token t at the completion's t-1
            src_row.extend([r] * b)
            src_col.extend([a - 1] + list(range(at, at + b - 1)))
            dst_col.extend(range(j * width, j * width + b))
            at += b
    q = torch.arange(total)
    causal = q[None, :] <= q[:, None]
    visible = (seg[:, None, :] == -1) | (seg[:, None, :] == seg[:, :, None])
    allowed = causal[None] & visible & (seg[:, None, :] != -2)
    allowed |= torch.eye(total, dtype=torch.bool)[None]  # a padding query sees itself: no empty softmax row
    dtype = getattr(model, "module", model).get_input_embeddings().weight.dtype
    mask = torch.zeros(allowed.shape, dtype=dtype).masked_fill_(~allowed, torch.finfo(dtype).min)
    logits = model(input_ids=ids.to(device), attention_mask=mask[:, None].to(device),
                   position_ids=pos.to(device)).logits
    picked = logits[torch.tensor(src_row, device=device), torch.tensor(src_col, device=device)]
    flat = torch.tensor(dst_col, device=device, dtype=torch.long)
    targets = completion_ids.reshape(-1)[flat]
    logp = torch.log_softmax(picked.float(), dim=-1).gather(-1, targets[:, None]).squeeze(-1)
    return torch.zeros(n * width, device=device, dtype=logp.dtype).index_put((flat,), logp).view(n, width)
