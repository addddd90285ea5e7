"""DPO: make the policy prefer chosen over rejected completions more than the reference does."""

from __future__ import annotations

import torch
import torch.nn.functional as F


def sequence_logprob(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sum of completion-token logprobs per sequence: log pi(y | x)."""
    return (logp * mask).sum(-1)


def dpo_loss(
    pol_chosen: torch.Tensor, pol_rejected: torch.Tensor,
    ref_chosen: torch.Tensor, ref_rejected: torch.Tensor,
    beta: float = 0.1,
) -> tuple[torch.Tensor, dict[str, float]]:
    """-log sigmoid(beta * ((pi_c - ref_c) - (pi_r - ref_r))), each a sequence logprob [B]."""
    margin = (pol_chosen - ref_chosen) - (pol_rejected - ref_rejected)
    loss = -F.logsigmoid(beta * margin).mean()
    with torch.no_grad():
        stats = {"reward_margin": float(beta * margin.mean()),
                 "pref_acc": float((margin > 0).float().mean())}
    return loss, stats
