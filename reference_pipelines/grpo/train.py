"""GRPO on a task's train split: sample a group per prompt, score with the task's reward, push up
completions that beat their group, stay near the reference model."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any

import torch

from rlbench.config.core import check
from reference_pipelines.common import (PipelineConfig, Rollout, build_group_batch, build_sequences, masked_mean,
                                       prompt_batches, start_run, track)
from reference_pipelines.grpo.loss import group_advantages, grpo_loss


@dataclass
class GRPOConfig(PipelineConfig):
    steps: int = 500
    group_size: int = 8
    lr: float = 3e-4
    kl_coef: float = 0.01
    clip_eps: float = 0.2
    normalize_std: bool = True
    updates_per_batch: int = 1  # >1: several clipped updates on one batch of rollouts
    # run each prompt once for its whole group, in the rollout's prefill (RolloutEngine) and in the
    # learner (Learner.shared_logprobs); false: one full sequence per completion, the same numbers
    # up to float rounding at more compute
    share_prompt: bool = True

    def validate(self) -> None:
        super().validate()
        check(self.group_size >= 2, "group_size", self.group_size, ">= 2 (advantages are relative to the group)")
        check(self.clip_eps > 0, "clip_eps", self.clip_eps, "> 0")
        check(self.kl_coef >= 0, "kl_coef", self.kl_coef, ">= 0")
        check(self.updates_per_batch >= 1, "updates_per_batch", self.updates_per_batch, ">= 1")


def run(cfg: GRPOConfig) -> dict[str, Any]:
    from rlbench.rewards.source import batch_rewards

    ctx = start_run("grpo", cfg, reference_model=cfg.kl_coef > 0, tools=True)
    task, data, model_path, learner = ctx.task, ctx.data, ctx.model_path, ctx.learner
    rollout = Rollout(model_path, cfg, learner, share_prefill=cfg.share_prompt)
    batches = prompt_batches(data.train, cfg.batch_prompts, cfg.seed)
    with track(f"grpo {cfg.task}", cfg.steps) as bar:
        for step in range(1, cfg.steps + 1):
            t0 = time.monotonic()
            items = next(batches)
            prompts = [it["prompt"] for it in items]
            groups = rollout.generate(prompts, cfg.sampling(cfg.group_size, cfg.seed * 1_000_003 + step, task))
            t_rollout = time.monotonic()
            flat_items = [it for it, comps in zip(items, groups) for _ in comps]
            flat_prompts = [it["prompt"] for it in flat_items]
            flat_ids = [c.token_ids for comps in groups for c in comps]
            tool_masks = [c.tool_mask for comps in groups for c in comps] if task.tools.name else None
            # local with answers, else the grading server's reward endpoint (rlbench/rewards/source.py)
            rewards = batch_rewards(task, flat_items, [c.text for comps in groups for c in comps])
            r = torch.tensor(rewards, dtype=torch.float32)
            adv = group_advantages(r, cfg.group_size, cfg.normalize_std)
            t_reward = time.monotonic()
            if cfg.share_prompt:
                seq = build_group_batch(learner.tokenizer, prompts, flat_ids, cfg.group_size, cfg.max_new_tokens, tool_masks)

                def logprobs(lrn, reference=False, seq=seq):
                    return lrn.shared_logprobs(seq, reference=reference)
            else:
                seq = build_sequences(learner.tokenizer, flat_prompts, flat_ids, cfg.max_new_tokens, tool_masks)

                def logprobs(lrn, reference=False, seq=seq):
                    return lrn.logprobs(seq.input_ids, seq.attention_mask, reference=reference)
            with torch.no_grad():
                learner.engine.eval()
                # one update per batch: the sampling policy is the current one, ratio = 1 exactly,
                # so the old logprobs are the live ones detached (saves a forward pass)
                old = logprobs(learner) if cfg.updates_per_batch > 1 else None
                ref = logprobs(learner, reference=True) if cfg.kl_coef > 0 else None
            for _ in range(cfg.updates_per_batch):
                def loss_fn(lrn, seq=seq, old=old, ref=ref, logprobs=logprobs):
                    logp = logprobs(lrn)
                    loss, stats = grpo_loss(logp, logp.detach() if old is None else old, ref, adv, seq.mask,
                                            cfg.clip_eps, cfg.kl_coef)
                    stats["entropy_proxy"] = float(-masked_mean(logp.detach(), seq.mask))
                    return loss, stats
                stats = learner.train_step(loss_fn)
            t_learn = time.monotonic()
            rollout.sync(learner.export_weights())
            t_end = time.monotonic()
            dt = t_end - t0
            tokens = int(seq.mask.sum())
            rec = {"step": step, "reward_mean": float(r.mean()), "reward_std": float(r.std(unbiased=False)),
                   "loss": stats["loss"], "kl": stats["kl"], "entropy": stats["entropy_proxy"],
                   "clip_frac": stats["clip_frac"], "completion_len": float(seq.completion_lengths.mean()),
                   "tokens_per_s": tokens / dt, "samples_per_s": len(rewards) / dt, "step_time": dt,
                   # where the step's time went: sampling, rewards, the learner's passes, the weight sync
                   "time_rollout": t_rollout - t0, "time_reward": t_reward - t_rollout,
                   "time_learn": t_learn - t_reward, "time_sync": t_end - t_learn}
            if ctx.end_step(rec, rollout, bar, sync_before_eval=False):
                break
    return ctx.summary()
