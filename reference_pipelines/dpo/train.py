"""DPO on preference pairs: from a pairs file (prompt, chosen, rejected), or built from the base
model's own samples on train prompts, judged by the task's reward (correct = chosen)."""

from __future__ import annotations

import json
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from rlbench.config.core import check
from reference_pipelines.common import (PipelineConfig, Rollout, build_sequences, start_run, track)
from reference_pipelines.dpo.loss import dpo_loss, sequence_logprob


@dataclass
class DPOConfig(PipelineConfig):
    steps: int = 300
    batch_prompts: int = 32
    lr: float = 3e-4
    beta: float = 0.1
    pairs: str = ""  # a JSONL of {prompt, chosen, rejected}; empty: build from samples
    pair_prompts: int = 2000  # train prompts sampled to build pairs
    samples_per_prompt: int = 8
    gold_fallback: bool = True  # no correct sample: use the train answer as chosen

    def validate(self) -> None:
        super().validate()
        check(self.beta > 0, "beta", self.beta, "> 0")
        check(self.samples_per_prompt >= 2, "samples_per_prompt", self.samples_per_prompt, ">= 2")


def build_pairs(rollout: Rollout, task: Any, items: list[dict[str, Any]], cfg: DPOConfig) -> list[dict[str, str]]:
    from rlbench.rewards.source import batch_rewards, has_answers

    groups = rollout.generate([it["prompt"] for it in items], cfg.sampling(cfg.samples_per_prompt, cfg.seed, task))
    rng = random.Random(cfg.seed)
    pairs = []
    flat = batch_rewards(task, [it for it, comps in zip(items, groups) for _ in comps],
                         [c.text for comps in groups for c in comps])
    k = 0
    for it, comps in zip(items, groups):
        scores, k = flat[k:k + len(comps)], k + len(comps)
        good = [c.text for c, r in zip(comps, scores) if r > 0]
        bad = [c.text for c, r in zip(comps, scores) if r <= 0]
        if not good and cfg.gold_fallback and has_answers([it]):
            good = [it["answer"]]
        if good and bad:
            pairs.append({"prompt": it["prompt"], "chosen": rng.choice(good), "rejected": rng.choice(bad)})
    return pairs


def run(cfg: DPOConfig) -> dict[str, Any]:
    ctx = start_run("dpo", cfg, reference_model=True)
    task, data, model_path, out, learner = ctx.task, ctx.data, ctx.model_path, ctx.out, ctx.learner
    rollout = Rollout(model_path, cfg, learner)
    if cfg.pairs:
        pairs = [json.loads(line) for line in Path(cfg.pairs).read_text().splitlines() if line.strip()]
    else:
        pairs = build_pairs(rollout, task, data.train[: cfg.pair_prompts], cfg)
    if not pairs:
        raise RuntimeError("no preference pairs: every sampled completion scored the same")
    out.mkdir(parents=True, exist_ok=True)
    (out / "pairs.jsonl").write_text("".join(json.dumps(p) + "\n" for p in pairs))
    tok = learner.tokenizer
    enc = lambda texts: [tok(t, add_special_tokens=False)["input_ids"] for t in texts]  # noqa: E731
    rng = random.Random(cfg.seed)
    with track(f"dpo {cfg.task}", cfg.steps) as bar:
        for step in range(1, cfg.steps + 1):
            t0 = time.monotonic()
            batch = rng.sample(pairs, min(cfg.batch_prompts, len(pairs)))
            prompts = [p["prompt"] for p in batch] * 2
            comps = enc([p["chosen"] for p in batch]) + enc([p["rejected"] for p in batch])
            seq = build_sequences(tok, prompts, comps, max_new_tokens=max(len(c) for c in comps) + 1)
            n = len(batch)
            with torch.no_grad():
                ref = sequence_logprob(learner.logprobs(seq.input_ids, seq.attention_mask, reference=True), seq.mask)

            def loss_fn(lrn):
                pol = sequence_logprob(lrn.logprobs(seq.input_ids, seq.attention_mask), seq.mask)
                return dpo_loss(pol[:n], pol[n:], ref[:n], ref[n:], cfg.beta)

            stats = learner.train_step(loss_fn)
            dt = time.monotonic() - t0
            rec = {"step": step, **stats, "samples_per_s": 2 * n / dt, "step_time": dt}
            if ctx.end_step(rec, rollout, bar, sync_before_eval=True):
                break
    return ctx.summary(pairs=len(pairs))
