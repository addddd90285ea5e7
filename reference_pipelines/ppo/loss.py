"""PPO: GAE over completion tokens, clipped policy loss, clipped value loss."""

from __future__ import annotations

import torch


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float = 1.0,
        lam: float = 0.95) -> tuple[torch.Tensor, torch.Tensor]:
    """Advantages and returns for [B, T] token rewards and values; positions where mask is 0
    (prompt, padding) are skipped, and the value after the last completion token is 0."""
    adv = torch.zeros_like(rewards)
    last = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    next_value = torch.zeros(rewards.shape[0], dtype=rewards.dtype)
    for t in reversed(range(rewards.shape[1])):
        m = mask[:, t]
        delta = rewards[:, t] + gamma * next_value - values[:, t]
        last = delta + gamma * lam * last
        adv[:, t] = last * m
        # outside the completion, carry nothing backwards
        last = last * m
        next_value = torch.where(m > 0, values[:, t], next_value * 0)
    return adv, adv + values


def whiten(x: torch.Tensor, mask: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    mean = (x * mask).sum() / mask.sum().clamp(min=1)
    var = (((x - mean) ** 2) * mask).sum() / mask.sum().clamp(min=1)
    return (x - mean) / torch.sqrt(var + eps) * mask


def ppo_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, adv: torch.Tensor, mask: torch.Tensor,
                    clip_eps: float = 0.2) -> tuple[torch.Tensor, float]:
    ratio = torch.exp(logp - old_logp)
    loss = -torch.minimum(ratio * adv, torch.clamp(ratio, 1 - clip_eps, 1 + clip_eps) * adv)
    clip_frac = float((((ratio - 1).abs() > clip_eps).float() * mask).sum() / mask.sum().clamp(min=1))
    return (loss * mask).sum() / mask.sum().clamp(min=1), clip_frac


def ppo_value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
                   clip: float = 0.2) -> torch.Tensor:
    clipped = old_values + torch.clamp(values - old_values, -clip, clip)
    loss = torch.maximum((values - returns) ** 2, (clipped - returns) ** 2)
    return 0.5 * (loss * mask).sum() / mask.sum().clamp(min=1)
