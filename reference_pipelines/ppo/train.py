"""PPO with a learned critic: per-token KL penalty to the reference, the task reward on the last
completion token, GAE, several clipped epochs per batch of rollouts."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from rlbench.config.core import check
from reference_pipelines.common import (PipelineConfig, Rollout, build_sequences, masked_mean, prompt_batches, start_run, track)
from reference_pipelines.ppo.loss import gae, ppo_policy_loss, ppo_value_loss, whiten


class ValueModel(torch.nn.Module):
    """The base model's trunk with a scalar head: V(prefix) at every position."""

    def __init__(self, model_path: str, attention: str = "sdpa"):
        super().__init__()
        from transformers import AutoModel

        self.trunk = AutoModel.from_pretrained(model_path, dtype=torch.float32, attn_implementation=attention)
        self.head = torch.nn.Linear(self.trunk.config.hidden_size, 1)
        torch.nn.init.zeros_(self.head.weight)
        torch.nn.init.zeros_(self.head.bias)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        hidden = self.trunk(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        return self.head(hidden).squeeze(-1).float()


@dataclass
class PPOConfig(PipelineConfig):
    steps: int = 600
    samples_per_prompt: int = 4
    lr: float = 3e-4
    critic_lr: float = 1e-3
    kl_coef: float = 0.02
    clip_eps: float = 0.2
    value_clip: float = 0.2
    vf_coef: float = 0.5
    gamma: float = 1.0
    lam: float = 0.95
    ppo_epochs: int = 2

    def validate(self) -> None:
        super().validate()
        check(self.ppo_epochs >= 1, "ppo_epochs", self.ppo_epochs, ">= 1")
        check(0 <= self.lam <= 1, "lam", self.lam, "in [0, 1]")
        check(0 < self.gamma <= 1, "gamma", self.gamma, "in (0, 1]")


def run(cfg: PPOConfig) -> dict[str, Any]:
    from rlbench.engines.learner import LearnerConfig, deepspeed_engine
    from rlbench.rewards.source import batch_rewards

    ctx = start_run("ppo", cfg, reference_model=True)
    task, data, model_path, learner = ctx.task, ctx.data, ctx.model_path, ctx.learner
    # the critic computes in the learner's precision (fp32 masters either way)
    critic = deepspeed_engine(ValueModel(model_path, learner.attention),
                              LearnerConfig(zero_stage=cfg.zero_stage, lr=cfg.critic_lr), learner.dtype)
    rollout = Rollout(model_path, cfg, learner)
    batches = prompt_batches(data.train, cfg.batch_prompts, cfg.seed)
    with track(f"ppo {cfg.task}", cfg.steps) as bar:
        for step in range(1, cfg.steps + 1):
            t0 = time.monotonic()
            items = next(batches)
            groups = rollout.generate([it["prompt"] for it in items],
                                      cfg.sampling(cfg.samples_per_prompt, cfg.seed * 1_000_003 + step, task))
            flat_items = [it for it, comps in zip(items, groups) for _ in comps]
            prompts = [it["prompt"] for it in flat_items]
            ids = [c.token_ids for comps in groups for c in comps]
            scores = batch_rewards(task, flat_items, [c.text for comps in groups for c in comps])
            seq = build_sequences(learner.tokenizer, prompts, ids, cfg.max_new_tokens)
            score = torch.tensor(scores)
            with torch.no_grad():
                learner.engine.eval()
                critic.eval()
                old = learner.logprobs(seq.input_ids, seq.attention_mask)
                ref = learner.logprobs(seq.input_ids, seq.attention_mask, reference=True)
                old_values = critic(seq.input_ids, seq.attention_mask)[:, :-1] * seq.mask
                token_rewards = -cfg.kl_coef * (old - ref) * seq.mask
                last = (seq.mask.cumsum(-1) == seq.mask.sum(-1, keepdim=True)) & (seq.mask > 0)
                token_rewards = token_rewards + last.float() * score.unsqueeze(-1)
                adv, returns = gae(token_rewards, old_values, seq.mask, cfg.gamma, cfg.lam)
                adv = whiten(adv, seq.mask)
            for _ in range(cfg.ppo_epochs):
                def loss_fn(lrn):
                    logp = lrn.logprobs(seq.input_ids, seq.attention_mask)
                    loss, clip_frac = ppo_policy_loss(logp, old, adv, seq.mask, cfg.clip_eps)
                    return loss, {"clip_frac": clip_frac, "entropy": float(-masked_mean(logp.detach(), seq.mask))}
                stats = learner.train_step(loss_fn)
                critic.train()
                values = critic(seq.input_ids, seq.attention_mask)[:, :-1]
                vloss = cfg.vf_coef * ppo_value_loss(values, old_values, returns, seq.mask, cfg.value_clip)
                critic.backward(vloss)
                critic.step()
            rollout.sync(learner.export_weights())
            dt = time.monotonic() - t0
            rec = {"step": step, "reward_mean": float(score.mean()), "reward_std": float(score.std(unbiased=False)),
                   "loss": stats["loss"], "value_loss": float(vloss.detach()),
                   "kl": float(masked_mean(old - ref, seq.mask)), "entropy": stats["entropy"],
                   "clip_frac": stats["clip_frac"], "samples_per_s": len(scores) / dt, "step_time": dt}
            if ctx.end_step(rec, rollout, bar, sync_before_eval=False):
                break
    return ctx.summary()
