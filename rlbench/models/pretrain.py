"""Deterministic, seeded pretraining of a zoo model on its domain corpus.

The skill of a tiny model appears sharply (measured: 5% to 97% greedy accuracy between 1500 and
6000 steps on 2-digit addition), so a fixed step count lands a base model at a skill level that
shifts with seeds and machines. A recipe may instead stop at the first evaluation whose greedy
accuracy on a calibration set (drawn from the corpus generator, never from a task split) reaches
`target_accuracy`: the base then has partial skill, which is what RL needs to have room. Where
that happens differs between CPUs, so the canonical build's step count is recorded in its recipe
(`steps`) and every other machine trains exactly that many steps: the shipped, hash-pinned
artifact (rlbench/models/zoo.py) is the base everywhere, and a rebuild only says whether it
reproduced it.
"""

from __future__ import annotations

import math
import random
import time
from dataclasses import dataclass, field
from typing import Any, Callable

import torch
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from rlbench.data.generators import corpus_format, corpus_tool, resolve_generator
from rlbench.engines.hf_generate import generate
from rlbench.engines.sampling import SamplingParams
from rlbench.models.recipe import ModelRecipe
from rlbench.progress import track
from rlbench.rewards import score_many


@dataclass
class PretrainLog:
    steps: int = 0
    seconds: float = 0.0
    stopped_by: str = "max_steps"  # max_steps | steps (a pinned count) | target_accuracy
    first_loss: float = math.nan
    curve: list[dict[str, Any]] = field(default_factory=list)

    def failure(self, cfg: Any) -> str:
        """Why this build must not be used ('' when it may): a loss that did not fall, or a
        calibration target never reached. Such a base has no skill for RL to build on (measured
        on another CPU: calc-s trained flat at loss 1.80 with calibration 0.000 and was cached
        all the same; its task's reference gain fell from +77 to +0.1 points)."""
        last = self.curve[-1] if self.curve else {}
        loss = last.get("loss", math.nan)
        if not loss <= cfg.max_loss_ratio * self.first_loss:
            return (f"its loss did not fall: {loss:.3f} after {self.steps} steps against {self.first_loss:.3f} at "
                    f"step 1 (more than pretrain.max_loss_ratio={cfg.max_loss_ratio} of it)")
        acc = last.get("calib_greedy_acc")
        if cfg.target_accuracy is not None and (acc is None or acc < cfg.target_accuracy):
            return (f"it never reached its calibration target {cfg.target_accuracy:.3f} (greedy accuracy "
                    f"{acc if acc is not None else float('nan'):.3f} after {self.steps} steps)")
        return ""


def make_model(recipe: ModelRecipe, tokenizer: PreTrainedTokenizerFast) -> LlamaForCausalLM:
    a = recipe.arch
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=a.hidden_size,
        intermediate_size=a.intermediate_size,
        num_hidden_layers=a.num_layers,
        num_attention_heads=a.num_heads,
        num_key_value_heads=a.num_heads,
        head_dim=a.hidden_size // a.num_heads,
        max_position_embeddings=a.max_position_embeddings,
        tie_word_embeddings=a.tie_word_embeddings,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    torch.manual_seed(recipe.pretrain.seed)
    return LlamaForCausalLM(config)


class _Corpus:
    """An endless, seeded stream of (prompt + answer) texts mixed over generator families."""

    def __init__(self, recipe: ModelRecipe):
        self.gen = resolve_generator(recipe.corpus.generator)
        self.params = dict(recipe.corpus.params)
        self.families = list(recipe.corpus.mix.keys())
        self.weights = [float(recipe.corpus.mix[f]) for f in self.families]
        self.rng = random.Random(f"corpus:{recipe.corpus.seed}")

    def item(self, family: str | None = None) -> dict[str, Any]:
        fam = family or self.rng.choices(self.families, weights=self.weights)[0]
        return self.gen(fam, self.rng, self.params)


def _batch(tokenizer: PreTrainedTokenizerFast, texts: list[str]) -> dict[str, torch.Tensor]:
    ids = [tokenizer(t)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    width = max(len(x) for x in ids)
    input_ids = torch.full((len(ids), width), tokenizer.pad_token_id, dtype=torch.long)
    mask = torch.zeros((len(ids), width), dtype=torch.long)
    for i, x in enumerate(ids):
        input_ids[i, : len(x)] = torch.tensor(x)
        mask[i, : len(x)] = 1
    labels = input_ids.masked_fill(mask == 0, -100)
    return {"input_ids": input_ids, "attention_mask": mask, "labels": labels}


def calibration_accuracy(model, tokenizer, items: list[dict[str, Any]], max_new_tokens: int = 8,
                         reward: str = "exact_int", tool: str = "", max_calls: int = 2) -> float:
    greedy = SamplingParams(greedy=True, max_new_tokens=max_new_tokens, tool=tool, max_calls=max_calls)
    outs = generate(model, tokenizer, [it["prompt"] for it in items], greedy, batch_size=256)
    # score_many: a reward with a batch form (a program run per completion) runs them side by side
    return sum(score_many(reward, {}, [o[0].text for o in outs], [it["answer"] for it in items])) / max(len(items), 1)


def pretrain(recipe: ModelRecipe, tokenizer: PreTrainedTokenizerFast,
             on_eval: Callable[[int, LlamaForCausalLM], None] | None = None) -> tuple[LlamaForCausalLM, PretrainLog]:
    """`on_eval(step, model)` runs at every calibration point (scripts/calibrate_base.py saves
    the model there to pick a recipe's `steps`)."""
    cfg = recipe.pretrain
    torch.set_num_threads(cfg.num_threads)
    model = make_model(recipe, tokenizer)
    corpus = _Corpus(recipe)
    calib_rng = random.Random(f"calib:{recipe.corpus.seed}")
    calib = [corpus.gen("main", calib_rng, corpus.params) for _ in range(cfg.calib_size)]
    opt = torch.optim.AdamW(model.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay, betas=(0.9, 0.98))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / max(cfg.warmup_steps, 1)))
    log = PretrainLog()
    start = time.monotonic()
    loss_ema = math.nan
    total = cfg.steps or cfg.max_steps
    with track(f"pretrain {recipe.name}", total) as bar:
        for step in range(1, total + 1):
            model.train()
            # `trace`: a generator's own corpus text after the prompt (a tool call and its value)
            texts = [(it := corpus.item())["prompt"] + it.get("trace", it["answer"]) for _ in range(cfg.batch_size)]
            loss = model(**_batch(tokenizer, texts)).loss
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            if step == 1:
                log.first_loss = loss.item()
            loss_ema = loss.item() if math.isnan(loss_ema) else 0.95 * loss_ema + 0.05 * loss.item()
            bar.advance()
            if step % cfg.eval_every == 0 or step == total:
                acc = calibration_accuracy(model, tokenizer, calib, *reversed(corpus_format(corpus.gen)),
                                           **corpus_tool(corpus.gen))
                log.curve.append({"step": step, "loss": round(loss_ema, 4), "calib_greedy_acc": acc,
                                  "seconds": round(time.monotonic() - start, 1)})
                bar.update(loss=f"{loss_ema:.3f}", acc=f"{acc:.3f}")
                if on_eval is not None:
                    on_eval(step, model)
                if cfg.steps is None and cfg.target_accuracy is not None and step >= cfg.min_steps \
                        and acc >= cfg.target_accuracy:
                    log.stopped_by = "target_accuracy"
                    log.steps = step
                    break
            log.steps = step
            if cfg.steps is not None:
                log.stopped_by = "steps"
    log.seconds = round(time.monotonic() - start, 1)
    model.eval()
    return model, log
