"""Batched sampling with HF transformers `generate`: the backend that is always available.

Deterministic by construction, and per item: every sampled completion draws from its own
generator, seeded by (seed, the prompt's key, the sample's number), so a completion depends
neither on what ran before it in the process nor on the batch size or on which prompts share its
batch (a GPU's larger batches and a CPU's smaller ones draw the same noise for the same item).
Sampling is Gumbel-max over the tempered, top-p-filtered logits (`_RowSampler`), an exact draw
from that distribution. What can still differ between machines is float arithmetic: a near tie
between two tokens may break the other way (measured in docs/benchmarks.md).

The caller's `SamplingParams` (rlbench/engines/sampling.py) are the only generation settings.
`model.generate` fills every setting left unset from `model.generation_config`, which
`from_pretrained` loads from the checkpoint's `generation_config.json` (or derives from
`config.json`): a checkpoint could sharpen its own sampling (min_p, top_k, temperature,
repetition penalty, suppressed or forced tokens) and score higher without any training. So each
call builds an explicit GenerationConfig and resets the model's own to an empty default first
(`harness_generation`); transformers 5.x merges the two.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field, replace
from typing import Callable, Iterator, Sequence

import torch
from transformers import DynamicCache, GenerationConfig, PreTrainedModel, PreTrainedTokenizerBase
from transformers.generation.logits_process import (LogitsProcessor, LogitsProcessorList, TemperatureLogitsWarper,
                                                    TopPLogitsWarper)

from rlbench.engines.sampling import SamplingParams


@dataclass
class Completion:
    prompt_index: int
    token_ids: list[int]
    text: str
    logprobs: list[float] = field(default_factory=list)
    # with a tool: 1 where the model wrote the token, 0 where the environment did (empty: all 1);
    # a trainer's loss goes over the model's tokens only
    tool_mask: list[int] = field(default_factory=list)
    tool_calls: int = 0


def harness_generation(model: PreTrainedModel) -> PreTrainedModel:
    """Drop the generation settings a checkpoint brought (generation_config.json, or those
    derived from config.json): `generate` would otherwise fill every setting the caller left
    unset from them. Returns the model, its `generation_config` an empty default."""
    model.generation_config = GenerationConfig()
    return model


def generation_config(*, greedy: bool, temperature: float, top_p: float, max_new_tokens: int, n: int,
                      pad_token_id: int | None, eos_token_id: int | list[int] | None,
                      with_logprobs: bool) -> GenerationConfig:
    """Every setting `generate` uses, from the caller's arguments alone: no top_k (0), min_p,
    penalties or token constraints beyond what plain sampling at `temperature` and `top_p` means."""
    cfg = GenerationConfig(max_new_tokens=max_new_tokens, min_new_tokens=0, pad_token_id=pad_token_id,
                           eos_token_id=eos_token_id, return_dict_in_generate=True, output_scores=with_logprobs,
                           num_beams=1, repetition_penalty=1.0, no_repeat_ngram_size=0)
    if greedy:
        cfg.do_sample, cfg.num_return_sequences = False, 1
    else:
        cfg.do_sample, cfg.temperature, cfg.top_p, cfg.top_k, cfg.num_return_sequences = True, temperature, top_p, 0, n
    return cfg


def row_seed(seed: int, key: int, sample: int) -> int:
    """The sampling seed of one completion: sample `sample` of the prompt keyed `key`."""
    return (seed * 1_000_003 + key * 1_009 + sample) % (2 ** 63 - 1)


class _RowSampler(LogitsProcessor):
    """Samples each row with its own generator (Gumbel-max) and hands `generate` a one-hot score
    row, so its own multinomial draw only confirms the choice. Temperature and top-p are applied
    here with transformers' own warpers, since `generate` runs custom processors before its
    warpers; the warped log-probabilities are kept for the caller's logprobs."""

    def __init__(self, seeds: Sequence[int], temperature: float, top_p: float, keep_scores: bool):
        self.gens = [torch.Generator().manual_seed(s) for s in seeds]
        self.warpers = [w for w in (TemperatureLogitsWarper(temperature) if temperature != 1.0 else None,
                                    TopPLogitsWarper(top_p) if top_p < 1.0 else None) if w is not None]
        self.keep_scores = keep_scores
        self.scores: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        for w in self.warpers:
            scores = w(input_ids, scores)
        if self.keep_scores:
            self.scores.append(scores.clone())
        noise = torch.stack([torch.rand(scores.shape[1], generator=g, dtype=torch.float64) for g in self.gens])
        gumbel = -torch.log(-torch.log(noise.clamp_min(1e-300)))
        pick = (scores.double().cpu() + gumbel).argmax(-1).to(scores.device)
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, pick[:, None], 0.0)


def _prefill_once(model: PreTrainedModel, enc: dict[str, torch.Tensor], n: int) -> dict[str, object]:
    """The inputs of one `generate` call that samples `n` completions of each prompt while running
    each prompt's prefill once. `generate` with `num_return_sequences=n` copies every prompt `n`
    times before its first forward, so a group of 8 paid for 8 prefills of one prompt: more than
    its decoding on short answers. Here the prompts but their last token run once, their cache is
    repeated `n` times per row, and `generate` goes on from it with the last token (positions as
    `generate` derives them from the left-padded attention mask, so the logits are the same up to
    float rounding)."""
    ids, mask = enc["input_ids"], enc["attention_mask"]
    cache = DynamicCache(config=model.config)
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    model(input_ids=ids[:, :-1], attention_mask=mask[:, :-1], position_ids=positions[:, :-1],
          past_key_values=cache, use_cache=True)
    cache.batch_repeat_interleave(n)
    return {"input_ids": ids.repeat_interleave(n, 0), "attention_mask": mask.repeat_interleave(n, 0),
            "past_key_values": cache}


def _batches(n: int, size: int) -> Iterator[tuple[int, range]]:
    for b, start in enumerate(range(0, n, size)):
        yield b, range(start, min(start + size, n))


@torch.no_grad()
def generate(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    sampling: SamplingParams = SamplingParams(),
    *,
    batch_size: int = 256,
    with_logprobs: bool = False,
    on_batch: Callable[[int], None] | None = None,
    keys: Sequence[int] | None = None,
    first_sample: Sequence[int] | None = None,
    share_prefill: bool = True,
) -> list[list[Completion]]:
    """`sampling.per_prompt` completions per prompt, as `sampling` says (rlbench/engines/sampling.py).
    With a `sampling.tool` (rlbench/envs), generation pauses at the tool's stop text, the
    environment writes its answer into the completion, and the model goes on, up to
    `sampling.max_calls` calls. The other arguments say how to run, not what to sample:
    `on_batch(prompts_done)` after each batch; `keys`: each prompt's key for its sampling seeds
    (default: its position); `first_sample`: the number of each prompt's first sample (default 0),
    for continuations of one sample; `share_prefill`: run each prompt's prefill once for all its
    samples (`_prefill_once`; false: once per sample, as `generate` does, for comparison)."""
    if sampling.tool:
        return _generate_with_tool(model, tokenizer, prompts, sampling, batch_size=batch_size,
                                   with_logprobs=with_logprobs, on_batch=on_batch, share_prefill=share_prefill)
    model.eval()
    harness_generation(model)
    device = next(model.parameters()).device
    greedy, per_prompt, stop_ids = sampling.greedy, sampling.per_prompt, sampling.stop_ids
    out: list[list[Completion]] = [[] for _ in prompts]
    eos = tokenizer.eos_token_id
    # sampling happens in _RowSampler: generate itself samples from its one-hot rows at T=1
    gen = generation_config(greedy=greedy, temperature=1.0, top_p=1.0, max_new_tokens=sampling.max_new_tokens,
                            n=per_prompt, pad_token_id=tokenizer.pad_token_id,
                            eos_token_id=[eos, *stop_ids] if stop_ids else eos, with_logprobs=with_logprobs)
    share = share_prefill and not greedy and per_prompt > 1
    shared_gen = copy.deepcopy(gen)
    shared_gen.num_return_sequences = 1  # with a shared prefill the rows are already the prompts' copies
    keys = list(range(len(prompts))) if keys is None else list(keys)
    first = [0] * len(prompts) if first_sample is None else list(first_sample)
    for b, idx in _batches(len(prompts), batch_size):
        enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, padding_side="left")
        enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        extra: dict[str, object] = {}
        call_gen = gen
        if share and enc["input_ids"].shape[1] > 1:
            enc, call_gen = _prefill_once(model, enc, per_prompt), shared_gen
        if not greedy:
            seeds = [row_seed(sampling.seed, keys[i], first[i] + j) for i in idx for j in range(per_prompt)]
            sampler = _RowSampler(seeds, sampling.temperature, sampling.top_p, with_logprobs)
            extra["logits_processor"] = LogitsProcessorList([sampler])
        res = model.generate(**enc, generation_config=call_gen, **extra)
        seqs = res.sequences[:, enc["input_ids"].shape[1]:]
        logps = None
        if with_logprobs:
            scores = sampler.scores if not greedy else res.scores
            logps = model.compute_transition_scores(res.sequences, scores, normalize_logits=True)
        for row in range(seqs.shape[0]):
            p = idx[row // per_prompt]
            ids = seqs[row].tolist()
            cut = ids.index(eos) if eos in ids else len(ids)
            for sid in stop_ids:  # a stop token stays in the completion; what follows it is padding
                if sid in ids[:cut]:
                    cut = ids.index(sid) + 1
            ids = ids[:cut]
            lp = logps[row, :cut].tolist() if logps is not None else []
            out[p].append(Completion(p, ids, tokenizer.decode(ids, skip_special_tokens=True), lp))
        if on_batch is not None:
            on_batch(len(idx))
    return out


def tool_stop_id(tokenizer: PreTrainedTokenizerBase, tool: str) -> int:
    """The token that ends a call of `tool`: where generation pauses for the environment."""
    from rlbench.envs import get_tool

    stop_text = get_tool(tool).stop
    stop = tokenizer(stop_text, add_special_tokens=False)["input_ids"]
    if len(stop) != 1:
        raise ValueError(f"tool {tool}: its stop text {stop_text!r} must be one token of this tokenizer")
    return stop[0]


def _generate_with_tool(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                        sampling: SamplingParams, *, batch_size: int, with_logprobs: bool,
                        on_batch: Callable[[int], None] | None, share_prefill: bool = True) -> list[list[Completion]]:
    """Rounds of generation: every completion that ends at the tool's stop token gets the tool's
    answer appended (masked: the environment's tokens) and continues, as a prompt of its own, with
    the tokens it has left. Environment tokens count against `max_new_tokens`. Each round is a
    tool-less `generate` with the tool's stop token; a continuation's seed is the call's own
    (seed + 7919 * call), keyed by its prompt and sample, so it draws what it would in any batch."""
    from rlbench.envs import get_tool

    env = get_tool(sampling.tool)
    stop_id = tool_stop_id(tokenizer, sampling.tool)
    max_new_tokens = sampling.max_new_tokens
    # the caller's own stop tokens still end a completion; only the tool's stop token continues it
    rounds = replace(sampling, tool="", stop_ids=(*sampling.stop_ids, stop_id))
    out = generate(model, tokenizer, prompts, rounds, batch_size=batch_size, with_logprobs=with_logprobs,
                   on_batch=on_batch, share_prefill=share_prefill)
    sample_no: dict[int, int] = {}  # each completion's number among its prompt's: its continuations' seeds
    for comps in out:
        for j, c in enumerate(comps):
            c.tool_mask = [1] * len(c.token_ids)
            sample_no[id(c)] = j
    for call in range(1, sampling.max_calls + 1):
        todo = [c for comps in out for c in comps
                if c.token_ids and c.token_ids[-1] == stop_id and c.tool_calls < call and len(c.token_ids) < max_new_tokens]
        if not todo:
            break
        conts = []
        for c in todo:
            answer = tokenizer(env.respond(prompts[c.prompt_index], c.text), add_special_tokens=False)["input_ids"]
            answer = answer[: max_new_tokens - len(c.token_ids)]
            c.token_ids = c.token_ids + answer  # new lists: completions never share one
            c.tool_mask = c.tool_mask + [0] * len(answer)
            if with_logprobs:
                c.logprobs = c.logprobs + [0.0] * len(answer)
            c.tool_calls += 1
            c.text = tokenizer.decode(c.token_ids, skip_special_tokens=True)
            conts.append(prompts[c.prompt_index] + c.text)
        left = [max_new_tokens - len(c.token_ids) for c in todo]
        go = [i for i, k in enumerate(left) if k > 0]
        if not go:
            break
        more = generate(model, tokenizer, [conts[i] for i in go],
                        replace(rounds, n=1, max_new_tokens=max(left[i] for i in go), seed=sampling.seed + 7919 * call),
                        batch_size=batch_size, with_logprobs=with_logprobs,
                        keys=[todo[i].prompt_index for i in go], first_sample=[sample_no[id(todo[i])] for i in go])
        for i, m in zip(go, more):
            c, extra = todo[i], m[0]
            ids = extra.token_ids[: left[i]]
            c.token_ids = c.token_ids + ids
            c.tool_mask = c.tool_mask + [1] * len(ids)
            if with_logprobs:
                c.logprobs = c.logprobs + extra.logprobs[: len(ids)]
            c.text = tokenizer.decode(c.token_ids, skip_special_tokens=True)
    return out
