"""SFT warm-up on a task's (prompt, answer) pairs from the train split."""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any


from reference_pipelines.common import (PipelineConfig, Rollout, build_sequences, prompt_batches, start_run, track)
from reference_pipelines.sft.loss import sft_loss


@dataclass
class SFTConfig(PipelineConfig):
    steps: int = 300
    batch_prompts: int = 32
    lr: float = 1e-3


def run(cfg: SFTConfig) -> dict[str, Any]:
    from rlbench.rewards import answer_is_completion
    from rlbench.tasks.registry import load_task

    reward = load_task(cfg.task).reward.name
    if not answer_is_completion(reward):  # checked before the learner loads: the answers are tests, not targets
        raise ValueError(f"SFT trains on the train answers as completions; task {cfg.task}'s reward '{reward}' "
                         "checks completions against its answers (tests, ids, instructions) rather than by them")
    ctx = start_run("sft", cfg, reference_model=False, tools=True)
    data, model_path, learner = ctx.data, ctx.model_path, ctx.learner
    rollout = Rollout(model_path, cfg, learner) if cfg.eval_every else None
    batches = prompt_batches(data.train, cfg.batch_prompts, cfg.seed)
    with track(f"sft {cfg.task}", cfg.steps) as bar:
        for step in range(1, cfg.steps + 1):
            t0 = time.monotonic()
            items = next(batches)
            answers = [learner.tokenizer(it["answer"], add_special_tokens=False)["input_ids"] for it in items]
            seq = build_sequences(learner.tokenizer, [it["prompt"] for it in items], answers,
                                  max_new_tokens=max(len(a) for a in answers) + 1)
            stats = learner.train_step(lambda lrn: (sft_loss(lrn.logprobs(seq.input_ids, seq.attention_mask), seq.mask), {}))
            dt = time.monotonic() - t0
            rec = {"step": step, "loss": stats["loss"], "samples_per_s": len(items) / dt, "step_time": dt}
            if ctx.end_step(rec, rollout, bar, sync_before_eval=True):
                break
    return ctx.summary()
