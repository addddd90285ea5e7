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

    def __init__(self, seeds: Sequence[int | None], temperature: float, top_p: float, keep_scores: bool):
        # a row seeded None is decoded greedily (`draw` only: `generate` cannot mix the two)
        self.gens = [None if s is None else torch.Generator().manual_seed(s) for s in seeds]
        self.warpers = [w for w in (TemperatureLogitsWarper(temperature) if temperature != 1.0 else None,
                                    TopPLogitsWarper(top_p) if top_p < 1.0 else None) if w is not None]
        self.keep_scores = keep_scores
        self.scores: list[torch.Tensor] = []

    def draw(self, scores: torch.FloatTensor, rows: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
        """The tokens of `rows` (one generator each, in the order of `scores`' rows) and the
        warped scores they were drawn from. Each generator advances once per draw, so a row draws
        the same noise whichever other rows are still in the batch. A greedy row (seeded None)
        takes the argmax of its raw scores, which are also what its logprobs come from."""
        raw = scores
        for w in self.warpers:
            scores = w(None, scores)
        sampled = [j for j, r in enumerate(rows) if self.gens[r] is not None]
        if not sampled:
            return raw.argmax(-1), raw
        some = scores if len(sampled) == len(rows) else scores[sampled]
        noise = torch.stack([torch.rand(scores.shape[1], generator=self.gens[rows[j]], dtype=torch.float64)
                             for j in sampled])
        gumbel = -torch.log(-torch.log(noise.clamp_min(1e-300)))
        drawn = (some.double().cpu() + gumbel).argmax(-1).to(scores.device)
        if len(sampled) == len(rows):
            return drawn, scores
        pick, warped = raw.argmax(-1), raw.clone()
        pick[sampled], warped[sampled] = drawn, some
        return pick, warped

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        pick, scores = self.draw(scores, range(len(self.gens)))
        if self.keep_scores:
            self.scores.append(scores.clone())
        out = torch.full_like(scores, float("-inf"))
        return out.scatter_(1, pick[:, None], 0.0)


def _decode(model: PreTrainedModel, enc: dict[str, torch.Tensor], n: int, sampler: "_RowSampler | None",
            max_new_tokens: int, eos: int | None, stop_ids: Sequence[int],
            with_logprobs: bool) -> list[tuple[list[int], list[float]]]:
    """`n` completions of each prompt in `enc` (left-padded), as `generate` would sample them, for
    less work: each prompt's prefill runs once for all its samples (its cache repeated `n` times
    per row), and a row leaves the batch as soon as it ends, where `generate` keeps computing
    every row until the longest one ends (on the tasks' bases, 30-70% of a batch's row-steps were
    rows already finished). Positions are what `generate` derives from the left-padded mask, and
    each row draws from its own generator (`_RowSampler.draw`), so a row's tokens do not depend
    on which rows share its batch; logits equal `generate`'s up to float rounding. Returns each
    row's tokens (EOS dropped, a stop token kept, as `generate`'s caller cuts them) and their
    log-probabilities under the warped distribution (empty unless `with_logprobs`)."""
    ids, mask = enc["input_ids"], enc["attention_mask"]
    positions = (mask.long().cumsum(-1) - 1).masked_fill(mask == 0, 0)
    cache = DynamicCache(config=model.config)
    logits = model(input_ids=ids, attention_mask=mask, position_ids=positions, past_key_values=cache,
                   use_cache=True, **_last_logits_only(model)).logits[:, -1, :]
    if n > 1:
        cache.batch_repeat_interleave(n)
        logits, mask = logits.repeat_interleave(n, 0), mask.repeat_interleave(n, 0)
    next_pos = positions[:, -1].repeat_interleave(n) + 1
    live = list(range(ids.shape[0] * n))
    rows: list[tuple[list[int], list[float]]] = [([], []) for _ in live]
    stops = set(stop_ids)
    for step in range(max_new_tokens):
        scores = logits.float()
        pick, warped = (scores.argmax(-1), scores) if sampler is None else sampler.draw(scores, live)
        picked = pick.tolist()
        lps = (torch.log_softmax(warped, -1).gather(1, pick[:, None].to(warped.device))[:, 0].tolist()
               if with_logprobs else None)
        keep = []
        for j, r in enumerate(live):
            token = picked[j]
            if token == eos:
                continue
            rows[r][0].append(token)
            if lps is not None:
                rows[r][1].append(lps[j])
            if token not in stops:
                keep.append(j)
        if not keep or step == max_new_tokens - 1:
            break
        if len(keep) < len(live):
            sel = torch.tensor(keep, device=mask.device)
            cache.batch_select_indices(sel)
            mask, next_pos, pick = mask[sel], next_pos[sel], pick[sel]
            live = [live[j] for j in keep]
        mask = torch.cat([mask, mask.new_ones((len(live), 1))], 1)
        logits = model(input_ids=pick[:, None], attention_mask=mask, position_ids=next_pos[:, None],
                       past_key_values=cache, use_cache=True).logits[:, -1, :]
        next_pos = next_pos + 1
    return rows


def _last_logits_only(model: PreTrainedModel) -> dict[str, int]:
    """Ask the prefill for the last position's logits only, where the model takes the argument
    (a prompt's other positions would cost a vocabulary-wide projection each for nothing)."""
    import inspect

    return {"logits_to_keep": 1} if "logits_to_keep" in inspect.signature(model.forward).parameters else {}


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
    greedy_too: bool = False,
) -> list[list[Completion]]:
    """`sampling.per_prompt` completions per prompt, as `sampling` says (rlbench/engines/sampling.py).
    With a `sampling.tool` (rlbench/envs), generation pauses at the tool's stop text, the
    environment writes its answer into the completion, and the model goes on, up to
    `sampling.max_calls` calls. The other arguments say how to run, not what to sample:
    `on_batch(prompts_done)` after each batch; `keys`: each prompt's key for its sampling seeds
    (default: its position); `first_sample`: the number of each prompt's first sample (default 0),
    for continuations of one sample; `share_prefill`: decode with `_decode` (each prompt's prefill
    once for all its samples, a row out of the batch once it ends); false: transformers' own
    `generate` (a prefill per sample, every row to the longest), the same tokens slower, kept to
    test and measure `_decode` against. `greedy_too` (sampling without a tool, `_decode` only;
    use `sample_and_greedy`): each prompt's greedy completion is decoded beside its samples, in
    the same batch from the same prefill, and comes last in its list."""
    if sampling.tool:
        return _generate_with_tool(model, tokenizer, prompts, sampling, batch_size=batch_size,
                                   with_logprobs=with_logprobs, on_batch=on_batch, share_prefill=share_prefill)
    model.eval()
    harness_generation(model)
    device = next(model.parameters()).device
    greedy, per_prompt, stop_ids = sampling.greedy, sampling.per_prompt, sampling.stop_ids
    if greedy_too and (greedy or not share_prefill):
        raise ValueError("greedy_too: only beside sampled completions, decoded by _decode")
    rows_per_prompt = per_prompt + greedy_too
    out: list[list[Completion]] = [[] for _ in prompts]
    eos = tokenizer.eos_token_id
    # sampling happens in _RowSampler: generate itself samples from its one-hot rows at T=1
    gen = generation_config(greedy=greedy, temperature=1.0, top_p=1.0, max_new_tokens=sampling.max_new_tokens,
                            n=per_prompt, pad_token_id=tokenizer.pad_token_id,
                            eos_token_id=[eos, *stop_ids] if stop_ids else eos, with_logprobs=with_logprobs)
    keys = list(range(len(prompts))) if keys is None else list(keys)
    first = [0] * len(prompts) if first_sample is None else list(first_sample)
    for b, idx in _batches(len(prompts), batch_size):
        enc = tokenizer([prompts[i] for i in idx], return_tensors="pt", padding=True, padding_side="left")
        enc = {k: v.to(device) for k, v in enc.items() if k in ("input_ids", "attention_mask")}
        sampler = None
        if not greedy:
            seeds: list[int | None] = []
            for i in idx:
                seeds += [row_seed(sampling.seed, keys[i], first[i] + j) for j in range(per_prompt)]
                seeds += [None] * greedy_too
            sampler = _RowSampler(seeds, sampling.temperature, sampling.top_p, with_logprobs)
        if share_prefill and enc["input_ids"].shape[1] > 0:
            rows = _decode(model, enc, rows_per_prompt, sampler, sampling.max_new_tokens, eos, stop_ids,
                           with_logprobs)
        else:
            rows = _hf_generate(model, enc, gen, sampler, eos, stop_ids, with_logprobs)
        for row, (ids, lp) in enumerate(rows):
            p = idx[row // rows_per_prompt]
            out[p].append(Completion(p, ids, tokenizer.decode(ids, skip_special_tokens=True), lp))
        if on_batch is not None:
            on_batch(len(idx))
    return out


def sample_and_greedy(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str],
                      sampling: SamplingParams, *, batch_size: int, greedy_batch_size: int,
                      on_batch: Callable[[int], None] | None = None,
                      share_prefill: bool = True) -> tuple[list[list[Completion]], list[Completion]]:
    """The sampled completions `generate` gives for `sampling`, and each prompt's greedy
    completion, which scoring always wants beside them. With `_decode` the greedy row rides in
    its prompt's batch, from the prefill its samples share (on arith-grpo's base: a quarter fewer
    forward passes than a greedy pass of its own); with a tool loop or transformers' `generate`
    the greedy completions are a second pass, `greedy_batch_size` prompts at a time. Same
    completions either way, up to float rounding."""
    argmax = replace(sampling, greedy=True, n=1)
    if sampling.tool or not share_prefill or sampling.greedy:
        sampled = generate(model, tokenizer, prompts, sampling, batch_size=batch_size, on_batch=on_batch,
                           share_prefill=share_prefill)
        greedy = generate(model, tokenizer, prompts, argmax, batch_size=greedy_batch_size, share_prefill=share_prefill)
        return sampled, [g[0] for g in greedy]
    both = generate(model, tokenizer, prompts, sampling, batch_size=batch_size, on_batch=on_batch, greedy_too=True)
    return [comps[:-1] for comps in both], [comps[-1] for comps in both]


def _hf_generate(model: PreTrainedModel, enc: dict[str, torch.Tensor], gen: GenerationConfig,
                 sampler: "_RowSampler | None", eos: int | None, stop_ids: Sequence[int],
                 with_logprobs: bool) -> list[tuple[list[int], list[float]]]:
    """`_decode`'s result by transformers' own `generate`: every prompt copied `n` times before
    its prefill, every row computed until the longest ends. Kept as the reference `_decode` is
    tested and measured against (`share_prefill=False`)."""
    extra = {"logits_processor": LogitsProcessorList([sampler])} if sampler is not None else {}
    res = model.generate(**enc, generation_config=gen, **extra)
    seqs = res.sequences[:, enc["input_ids"].shape[1]:]
    logps = None
    if with_logprobs:
        scores = sampler.scores if sampler is not None else res.scores
        logps = model.compute_transition_scores(res.sequences, scores, normalize_logits=True)
    rows = []
    for row in range(seqs.shape[0]):
        ids = seqs[row].tolist()
        cut = ids.index(eos) if eos in ids else len(ids)
        for sid in stop_ids:  # a stop token stays in the completion; what follows it is padding
            if sid in ids[:cut]:
                cut = ids.index(sid) + 1
        rows.append((ids[:cut], logps[row, :cut].tolist() if logps is not None else []))
    return rows


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
