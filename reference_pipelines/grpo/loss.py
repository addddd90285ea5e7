"""GRPO: group-relative advantages, a clipped importance ratio, KL to a frozen reference."""

from __future__ import annotations

import torch


def group_advantages(rewards: torch.Tensor, group_size: int, normalize_std: bool = True,
                     eps: float = 1e-6) -> torch.Tensor:
    """A_i = r_i - mean(r of its group), optionally / std(group). `rewards` is [prompts * group],
    completions of one prompt contiguous. A group whose rewards are all equal gets zero advantage:
    it carries no signal about which completion is better."""
    groups = rewards.view(-1, group_size)
    adv = groups - groups.mean(dim=1, keepdim=True)
    if normalize_std:
        adv = adv / (groups.std(dim=1, keepdim=True, unbiased=False) + eps)
    return adv.reshape(-1)


def kl_k3(logp: torch.Tensor, ref_logp: torch.Tensor) -> torch.Tensor:
    """Per-token estimate of KL(policy || reference): exp(ref - p) - (ref - p) - 1 >= 0, zero iff
    equal, unbiased under samples from the policy (Schulman's k3)."""
    d = ref_logp - logp
    return torch.exp(d) - d - 1


def grpo_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor,
    ref_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    clip_eps: float = 0.2,
    kl_coef: float = 0.0,
) -> tuple[torch.Tensor, dict[str, float]]:
    """Token tensors are [B, T]; `advantages` is [B]; `mask` is 1 on completion tokens only, so
    prompt and padding tokens never carry loss. Each sequence's token losses are averaged, then
    sequences are averaged (the GRPO paper's normalisation)."""
    ratio = torch.exp(logp - old_logp)
    adv = advantages.unsqueeze(-1)
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv
    per_token = -torch.minimum(unclipped, clipped)
    kl = torch.zeros_like(logp)
    if ref_logp is not None and kl_coef > 0:
        kl = kl_k3(logp, ref_logp)
        per_token = per_token + kl_coef * kl
    denom = mask.sum(-1).clamp(min=1)
    loss = ((per_token * mask).sum(-1) / denom).mean()
    with torch.no_grad():
        tokens = mask.sum().clamp(min=1)
        stats = {
            "kl": float((kl * mask).sum() / tokens) if ref_logp is not None and kl_coef > 0 else 0.0,
            "clip_frac": float((((ratio - 1).abs() > clip_eps).float() * mask).sum() / tokens),
            "ratio_mean": float((ratio * mask).sum() / tokens),
        }
    return loss, stats
