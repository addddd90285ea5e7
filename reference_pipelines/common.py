"""What every reference pipeline shares: config, visible data, sequences, logging, weight sync.

Pipelines see only the visible splits (train and dev): they are what an agent gets, and the
harness alone scores on test and heldout.
"""

from __future__ import annotations

import json
import math
import random
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator, Sequence

import torch

from rlbench.config.core import check
from rlbench.envs import tool_args
from rlbench.engines.hf_generate import Completion
from rlbench.engines.sampling import SamplingParams
from rlbench.progress import info, track


@dataclass
class PipelineConfig:
    """Fields common to every pipeline; each algorithm's config extends this one."""

    task: str = "arith-grpo"
    model: str = ""  # empty: the task's base model
    out: str = ""  # empty: runs/pipelines/<algo>-<task>-s<seed>
    seed: int = 0
    steps: int = 400
    batch_prompts: int = 16
    lr: float = 3e-4
    zero_stage: int = 0
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 0  # 0: the task's evaluation protocol's (eval.max_new_tokens)
    rollout_backend: str = "hf"
    # colocated: rollout engine in the learner's process, weights copied in memory each step;
    # actors: rollout engine as a Ray actor, weights through the object store each step
    placement: str = "colocated"
    num_threads: int = 2
    rollout_cpus: float = 1.0  # Ray resources of the rollout actor (placement=actors)
    rollout_gpus: float = 0.0
    eval_every: int = 100
    eval_prompts: int = 200
    save_every: int = 0  # 0: only the final checkpoint
    # > 0: stop after the step that passes this many seconds since the run started, and save the
    # checkpoint as at the end (a run that fits a time budget instead of being killed by it)
    max_seconds: float = 0.0
    device: str = "cpu"
    # fp32 | bf16 | auto | measure, learner and rollout alike; auto: bf16 where the CPU has native
    # bf16 (a rule), measure: the faster on this machine, timed (rlbench/engines/kernel_choice.py).
    # bf16 steps ~1.9x faster on an AMX Xeon but its arith-grpo heldout gains were a third of
    # fp32's (docs/benchmarks.md), so fp32 is the default
    precision: str = "fp32"
    attention: str = "auto"  # auto (rule) | measure (timed) | eager | sdpa
    # none | cosine: the learning rate falls from lr to lr * lr_min_ratio along a half cosine over
    # the run, measured in steps or, with max_seconds, in time, whichever is further along
    lr_decay: str = "none"
    lr_min_ratio: float = 0.1
    train_limit: int = 0  # train on the first N train items only (0: all); a design's preprocessing
    dedupe: bool = False  # drop train items whose prompt repeats an earlier one

    def validate(self) -> None:
        from rlbench.engines.precision import ATTENTION, PRECISIONS

        check(self.precision in PRECISIONS, "precision", self.precision, ", ".join(PRECISIONS))
        check(self.attention in ATTENTION, "attention", self.attention, ", ".join(ATTENTION))
        check(self.steps >= 1, "steps", self.steps, ">= 1")
        check(self.batch_prompts >= 1, "batch_prompts", self.batch_prompts, ">= 1")
        check(self.lr > 0, "lr", self.lr, "> 0")
        check(self.placement in ("colocated", "actors"), "placement", self.placement, "colocated, actors")
        check(self.rollout_backend in ("hf", "vllm", "auto"), "rollout_backend", self.rollout_backend, "auto, hf, vllm")
        check(self.temperature > 0, "temperature", self.temperature, "> 0")
        check(0 < self.top_p <= 1, "top_p", self.top_p, "in (0, 1]")
        check(self.max_new_tokens >= 0, "max_new_tokens", self.max_new_tokens, ">= 0 (0: the task's)")
        check(self.eval_every >= 0, "eval_every", self.eval_every, ">= 0 (0: no dev evaluation)")
        check(self.train_limit >= 0, "train_limit", self.train_limit, ">= 0 (0: all train items)")
        check(self.max_seconds >= 0, "max_seconds", self.max_seconds, ">= 0 (0: no time limit)")
        check(self.lr_decay in ("none", "cosine"), "lr_decay", self.lr_decay, "none, cosine")
        check(0 <= self.lr_min_ratio <= 1, "lr_min_ratio", self.lr_min_ratio, "in [0, 1]")

    def sampling(self, n: int, seed: int, task: Any) -> SamplingParams:
        """The rollout settings of every pipeline: `n` samples per prompt at this config's
        temperature and top_p, as long as `max_new_tokens` (0: the task's evaluation protocol's),
        with the task's tool loop when it has one. One place, so no pipeline drops a setting the
        others pass (ppo and dpo once sampled without top_p)."""
        return SamplingParams(n=n, temperature=self.temperature, top_p=self.top_p,
                              max_new_tokens=self.max_new_tokens or task.eval.max_new_tokens, seed=seed,
                              **tool_args(task))


@dataclass
class VisibleData:
    train: list[dict[str, Any]]
    dev: list[dict[str, Any]]


def visible_data(task: Any) -> VisibleData:
    """Train and dev only: from the task's data (harness side) or from an agent's workspace."""
    from rlbench.data.splits import prepare_data
    from rlbench.tasks.registry import task_dir
    from rlbench.tasks.spec import DataSource

    if task.data.source == DataSource.workspace:
        from rlbench.io import read_jsonl

        root = Path(task.data.workspace)
        return VisibleData(train=read_jsonl(root / "data" / "train.jsonl"), dev=read_jsonl(root / "data" / "dev.jsonl"))
    data = prepare_data(task, task_dir(task.name))
    return VisibleData(train=data.splits["train"], dev=data.splits["dev"])


def preprocess(items: Sequence[dict[str, Any]], train_limit: int = 0, dedupe: bool = False) -> list[dict[str, Any]]:
    """The train items a run sees: repeated prompts dropped (first kept), then the first N."""
    kept, seen = [], set()
    for it in items:
        if dedupe:
            if it["prompt"] in seen:
                continue
            seen.add(it["prompt"])
        kept.append(it)
    return kept[:train_limit] if train_limit else kept


def prompt_batches(items: Sequence[dict[str, Any]], batch: int, seed: int) -> Iterator[list[dict[str, Any]]]:
    """Endless shuffled epochs over the items, seeded."""
    rng = random.Random(seed)
    order = list(range(len(items)))
    while True:
        rng.shuffle(order)
        for i in range(0, len(order) - batch + 1, batch):
            yield [items[j] for j in order[i:i + batch]]


@dataclass
class SequenceBatch:
    """Right-padded prompt+completion sequences; `mask[:, t]` marks completion token t+1, aligned
    with token logprobs of shape [B, T-1]."""

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor

    @property
    def completion_lengths(self) -> torch.Tensor:
        return self.mask.sum(-1)


def _action_mask(comp: Sequence[int], tool_mask: Sequence[int] | None, with_eos: bool) -> list[int]:
    """1 on the tokens the policy wrote (EOS included), 0 on a tool's tokens (Completion.tool_mask)."""
    m = list(tool_mask) if tool_mask else [1] * len(comp)
    if len(m) != len(comp):
        raise ValueError(f"a tool mask of {len(m)} tokens for a completion of {len(comp)}")
    return m + ([1] if with_eos else [])


def build_sequences(tokenizer: Any, prompts: Sequence[str], completions: Sequence[Sequence[int]],
                    max_new_tokens: int, tool_masks: Sequence[Sequence[int]] | None = None) -> SequenceBatch:
    """A completion cut at max_new_tokens has no EOS; one that stopped gets its EOS back so the
    policy is also trained on when to stop. `tool_masks`: tokens a tool wrote carry no loss."""
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    rows, masks = [], []
    for i, (prompt, comp) in enumerate(zip(prompts, completions)):
        p_ids = tokenizer(prompt)["input_ids"]
        stopped = len(comp) < max_new_tokens
        c_ids = list(comp) + ([eos] if stopped else [])
        rows.append(p_ids + c_ids)
        masks.append([0] * (len(p_ids) - 1) + _action_mask(comp, tool_masks[i] if tool_masks else None, stopped))
    return _right_padded(rows, masks, pad)


def _right_padded(rows: Sequence[Sequence[int]], masks: Sequence[Sequence[int]], pad: int) -> SequenceBatch:
    width = max(len(r) for r in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    attn = torch.zeros((len(rows), width), dtype=torch.long)
    mask = torch.zeros((len(rows), width - 1), dtype=torch.float32)
    for i, (r, m) in enumerate(zip(rows, masks)):
        input_ids[i, : len(r)] = torch.tensor(r)
        attn[i, : len(r)] = 1
        mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return SequenceBatch(input_ids, attn, mask)


@dataclass
class GroupBatch:
    """`group` completions per prompt, the prompt stored once: prompts left-padded [P, Lp],
    completions right-padded [P*group, Lc]; `mask[:, j]` marks completion token j (EOS included),
    aligned with `Learner.shared_logprobs` of shape [P*group, Lc]."""

    prompt_ids: torch.Tensor
    prompt_attention: torch.Tensor
    completion_ids: torch.Tensor
    completion_attention: torch.Tensor
    mask: torch.Tensor
    group: int

    @property
    def completion_lengths(self) -> torch.Tensor:
        return self.mask.sum(-1)

    def full(self) -> SequenceBatch:
        """The same sequences as one right-padded SequenceBatch (each prompt repeated)."""
        rows, masks = [], []
        for i in range(self.completion_ids.shape[0]):
            p = self.prompt_ids[i // self.group][self.prompt_attention[i // self.group].bool()].tolist()
            c = self.completion_ids[i][self.completion_attention[i].bool()].tolist()
            rows.append(p + c)
            masks.append([0] * (len(p) - 1) + self.mask[i, : len(c)].tolist())
        return _right_padded(rows, masks, self.pad_id)

    pad_id: int = 0


def build_group_batch(tokenizer: Any, prompts: Sequence[str], completions: Sequence[Sequence[int]], group: int,
                      max_new_tokens: int, tool_masks: Sequence[Sequence[int]] | None = None) -> GroupBatch:
    """`completions` lists `group` per prompt in prompt order; EOS is added back as in build_sequences,
    and a tool's tokens carry no loss."""
    if len(completions) != len(prompts) * group:
        raise ValueError(f"{len(completions)} completions for {len(prompts)} prompts x group {group}")
    eos, pad = tokenizer.eos_token_id, tokenizer.pad_token_id
    p_rows = [tokenizer(p)["input_ids"] for p in prompts]
    c_rows = [list(c) + ([eos] if len(c) < max_new_tokens else []) for c in completions]
    lp, lc = max(len(r) for r in p_rows), max(len(r) for r in c_rows)
    prompt_ids = torch.full((len(p_rows), lp), pad, dtype=torch.long)
    prompt_attention = torch.zeros((len(p_rows), lp), dtype=torch.long)
    for i, r in enumerate(p_rows):
        prompt_ids[i, lp - len(r):] = torch.tensor(r)
        prompt_attention[i, lp - len(r):] = 1
    completion_ids = torch.full((len(c_rows), lc), pad, dtype=torch.long)
    completion_attention = torch.zeros((len(c_rows), lc), dtype=torch.long)
    for i, r in enumerate(c_rows):
        completion_ids[i, : len(r)] = torch.tensor(r)
        completion_attention[i, : len(r)] = 1
    mask = completion_attention.float()
    if tool_masks:
        for i, c in enumerate(completions):
            m = _action_mask(c, tool_masks[i], len(c) < max_new_tokens)
            mask[i, : len(m)] = torch.tensor(m, dtype=torch.float32)
    return GroupBatch(prompt_ids, prompt_attention, completion_ids, completion_attention, mask, group, pad)


def masked_mean(x: torch.Tensor, mask: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    if dim is None:
        return (x * mask).sum() / mask.sum().clamp(min=1)
    return (x * mask).sum(dim) / mask.sum(dim).clamp(min=1)


class Rollout:
    """The rollout engine in-process (colocated) or as a Ray actor; one call shape for both."""

    def __init__(self, model: str, cfg: PipelineConfig, learner: Any = None, share_prefill: bool = True):
        """`learner`: compute with its precision and attention (what `auto` or `measure` resolved to), so the
        rollout samples from the same numbers the learner trains. `share_prefill`: one prefill per
        prompt for its whole group (RolloutEngine)."""
        from rlbench.engines.rollout import RolloutEngine

        self.placement = cfg.placement
        precision, attention = ((learner.kernels.precision, learner.kernels.attention) if learner is not None
                                else (cfg.precision, cfg.attention))
        kwargs = dict(backend=cfg.rollout_backend, need_in_place_update=True, device=cfg.device,
                      precision=precision, attention=attention, share_prefill=share_prefill)
        if cfg.placement == "actors":
            import ray

            from rlbench.ray_session import ensure_ray

            ensure_ray()
            actor_cls = ray.remote(num_cpus=cfg.rollout_cpus, num_gpus=cfg.rollout_gpus)(RolloutEngine)
            self.engine = actor_cls.remote(model, num_threads=max(1, int(cfg.rollout_cpus)), **kwargs)
        else:
            self.engine = RolloutEngine(model, **kwargs)

    def _call(self, name: str, *args, **kwargs):
        if self.placement == "actors":
            import ray

            return ray.get(getattr(self.engine, name).remote(*args, **kwargs))
        return getattr(self.engine, name)(*args, **kwargs)

    def generate(self, prompts: Sequence[str], sampling: SamplingParams) -> list[list[Completion]]:
        """`RolloutEngine.generate` wherever the engine runs (the settings pickle to an actor whole)."""
        return self._call("generate", list(prompts), sampling)

    def sync(self, weights: dict[str, torch.Tensor]) -> None:
        if self.placement == "actors":
            import ray

            ray.get(self.engine.update_weights.remote(ray.put(weights)))
        else:
            self.engine.update_weights(weights)


def dev_accuracy(rollout: Rollout, task: Any, dev: Sequence[dict[str, Any]], max_new_tokens: int) -> float | None:
    """The pipeline's own greedy dev accuracy: a training signal, never a reported score. None on
    a task whose dev items carry no answers (only the grading server scores dev there)."""
    from rlbench.rewards.source import batch_rewards, has_answers

    if not dev or not has_answers(dev):
        return None
    greedy = SamplingParams(greedy=True, max_new_tokens=max_new_tokens, **tool_args(task))
    outs = rollout.generate([d["prompt"] for d in dev], greedy)
    return sum(batch_rewards(task, dev, [o[0].text for o in outs])) / len(dev)


class StepLog:
    """Per-step metrics to `steps.jsonl` (flushed each line, so a crash loses nothing logged)."""

    def __init__(self, out: Path):
        out.mkdir(parents=True, exist_ok=True)
        self.path = out / "steps.jsonl"
        self.fh = open(self.path, "a", encoding="utf-8")
        self.started = time.monotonic()

    def write(self, record: dict[str, Any]) -> None:
        record = {"time": round(time.monotonic() - self.started, 3), **record}
        self.fh.write(json.dumps(record) + "\n")
        self.fh.flush()

    def close(self) -> None:
        self.fh.close()


def default_out(algo: str, cfg: PipelineConfig) -> Path:
    task_name = Path(cfg.task).name or "task"  # a workspace path names its folder
    return Path(cfg.out) if cfg.out else Path("runs") / "pipelines" / f"{algo}-{task_name}-s{cfg.seed}"


@dataclass
class RunContext:
    """What every pipeline run starts from: the task, its visible data, the model, a learner."""

    algo: str
    cfg: PipelineConfig
    task: Any
    data: VisibleData
    model_path: str
    out: Path
    learner: Any
    started: float
    log: "StepLog"
    history: list[dict[str, Any]]
    stopped_by: str = "steps"
    base_lr: float = 0.0  # the learner's starting learning rate (a schedule scales it)

    def end_step(self, rec: dict[str, Any], rollout: "Rollout | None", bar: Any, sync_before_eval: bool) -> bool:
        """The end of every step of every pipeline: dev accuracy every `eval_every` steps (after a
        weight sync when the loop does not sync each step), the step log, the progress bar, and an
        intermediate checkpoint every `save_every` steps. True when `max_seconds` has passed: the
        loop stops there."""
        cfg, step = self.cfg, rec["step"]
        elapsed = time.monotonic() - self.started
        late = bool(cfg.max_seconds) and elapsed >= cfg.max_seconds
        if cfg.lr_decay == "cosine":
            done = min(1.0, max(step / cfg.steps, elapsed / cfg.max_seconds if cfg.max_seconds else 0.0))
            rec["lr"] = self.base_lr * (cfg.lr_min_ratio + (1 - cfg.lr_min_ratio) * 0.5 * (1 + math.cos(math.pi * done)))
            self.learner.set_lr(rec["lr"])
        if late:
            self.stopped_by = "max_seconds"
        if rollout is not None and cfg.eval_every and (step % cfg.eval_every == 0 or step == cfg.steps or late):
            if sync_before_eval:
                rollout.sync(self.learner.export_weights())
            dev = dev_accuracy(rollout, self.task, self.data.dev[: cfg.eval_prompts], cfg.max_new_tokens)
            if dev is not None:
                rec["dev_greedy"] = dev
        self.log.write(rec)
        self.history.append(rec)
        bar.advance()
        shown = {k: f"{rec[k]:.2f}" for k in ("reward_mean", "dev_greedy") if k in rec}
        if shown:
            bar.update(**shown)
        if cfg.save_every and step % cfg.save_every == 0:
            self.learner.save(self.out / f"checkpoint-{step}")
        return late

    def summary(self, **extra: Any) -> dict[str, Any]:
        """Close the step log, save the final checkpoint and `summary.json`; return the summary."""
        from rlbench.io import atomic_write_json

        self.log.close()
        history = self.history
        ckpt = self.learner.save(self.out / "checkpoint")
        summary = {"algorithm": self.algo, "task": self.cfg.task, "model": self.cfg.model or self.task.model.base,
                   "seed": self.cfg.seed, "steps": history[-1]["step"] if history else 0, "steps_planned": self.cfg.steps,
                   "stopped_by": self.stopped_by, "seconds": round(time.monotonic() - self.started, 1),
                   "checkpoint": str(ckpt), "kernels": asdict(self.learner.kernels),
                   "dev_greedy": [(h["step"], h["dev_greedy"]) for h in history if "dev_greedy" in h], **extra}
        if history and "reward_mean" in history[0]:
            tail = history[-50:]
            summary["first_reward"] = history[0]["reward_mean"]
            head = history[:50]
            summary["first_reward_mean_50"] = sum(h["reward_mean"] for h in head) / len(head)
            summary["last_reward_mean_50"] = sum(h["reward_mean"] for h in tail) / len(tail)
        atomic_write_json(self.out / "summary.json", summary)
        info(f"checkpoint: {ckpt}")
        return summary


def start_run(algo: str, cfg: PipelineConfig, reference_model: bool, lr: float | None = None,
              tools: bool = False) -> RunContext:
    """Seed, threads, task, visible data, model path, output folder and a DeepSpeed learner.
    `tools`: the pipeline masks a tool's tokens out of its loss (a task with a tool needs that)."""
    from rlbench.engines.learner import Learner, LearnerConfig
    from rlbench.models.zoo import resolve_model
    from rlbench.tasks.registry import load_task

    torch.manual_seed(cfg.seed)
    torch.set_num_threads(cfg.num_threads)
    task = load_task(cfg.task)
    if cfg.max_new_tokens == 0:  # as long as the harness lets the model write when it scores
        cfg.max_new_tokens = task.eval.max_new_tokens
    if task.tools.name and not tools:
        raise ValueError(f"{algo} does not handle tool calls (task {task.name} gives the model the "
                         f"'{task.tools.name}' tool): use grpo, or sft")
    data = visible_data(task)
    data.train = preprocess(data.train, cfg.train_limit, cfg.dedupe)
    if len(data.train) < cfg.batch_prompts:
        raise ValueError(f"{len(data.train)} train items after preprocessing; batch_prompts={cfg.batch_prompts} needs more")
    model_path = resolve_model(cfg.model or task.model.base).location
    learner = Learner(model_path, LearnerConfig(zero_stage=cfg.zero_stage, lr=lr or cfg.lr, reference_model=reference_model,
                                                precision=cfg.precision, attention=cfg.attention), device=cfg.device)
    out = default_out(algo, cfg)
    return RunContext(algo, cfg, task, data, model_path, out, learner, time.monotonic(), StepLog(out), [],
                      base_lr=lr or cfg.lr)


__all__ = ["PipelineConfig", "VisibleData", "visible_data", "preprocess", "prompt_batches", "SequenceBatch", "tool_args",
           "build_sequences", "GroupBatch", "build_group_batch", "masked_mean", "Rollout", "dev_accuracy", "StepLog", "default_out",
           "RunContext", "start_run", "track"]
