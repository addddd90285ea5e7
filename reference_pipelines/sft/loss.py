"""SFT: next-token cross-entropy on the answer tokens only (the prompt is given, not learned)."""

from __future__ import annotations

import torch


def sft_loss(logp: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Mean negative log-likelihood over answer tokens; `mask` is 1 on answer (+EOS) positions."""
    return -(logp * mask).sum() / mask.sum().clamp(min=1)
