#!/usr/bin/env python
"""How close the GRPO learner's step comes to what this machine's cores do at its matrix shapes.

`bench_engines.py` says the fp32 learner takes ~230 ms a step on arith-m; whether that is overhead
to cut or the work itself depends on the FLOP rate it reaches. This script builds one real GRPO
batch (arith-grpo train prompts, a group of sampled completions each, packed as the learner packs
them), times the learner's three passes on it (reference forward, policy forward, backward), and
times the same linear layers' matrix products alone (forward and both backward products, at the
batch's token count) as the ceiling. Both rates count the linear layers' FLOPs only (2 per weight
per token, times 3 for a forward and backward), so their ratio is the fraction of the ceiling the
learner reaches. Sides interleaved over `--repeats` rounds, medians with ranges.

    .venv/bin/python scripts/learner_roofline.py --model arith-m --precision fp32
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def _median_range(xs: list[float]) -> str:
    return f"{statistics.median(xs):.1f} [{min(xs):.1f}-{max(xs):.1f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--model", default="arith-m")
    p.add_argument("--precision", choices=["fp32", "bf16"], default="fp32")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=7)
    a = p.parse_args()
    if min(a.prompts, a.group, a.max_new, a.threads, a.repeats) < 1:
        p.error("--prompts, --group, --max-new, --threads and --repeats must be >= 1")

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlbench.data.splits import prepare_data
    from rlbench.engines.group_rows import shared_prefix_logprobs
    from rlbench.engines.kernel_choice import cpu_identity
    from rlbench.engines.rollout import RolloutEngine
    from rlbench.engines.sampling import SamplingParams
    from rlbench.models.zoo import resolve_model
    from rlbench.tasks.registry import load_task, task_dir
    from reference_pipelines.common import build_group_batch

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    dtype = torch.bfloat16 if a.precision == "bf16" else torch.float32
    path = resolve_model(a.model).location
    tok = AutoTokenizer.from_pretrained(path)
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager")
    ref = AutoModelForCausalLM.from_pretrained(path, dtype=dtype, attn_implementation="eager").eval()
    task = load_task("arith-grpo")
    prompts = [it["prompt"] for it in prepare_data(task, task_dir(task.name)).splits["train"][: a.prompts]]

    # the group's completions, sampled by the rollout engine as the GRPO pipeline samples them
    groups = RolloutEngine(path, backend="hf", batch_size=a.prompts * a.group, precision=a.precision,
                           num_threads=a.threads).generate(prompts, SamplingParams(n=a.group, max_new_tokens=a.max_new, seed=0))
    completions = [c.token_ids for comps in groups for c in comps]
    batch = build_group_batch(tok, prompts, completions, a.group, a.max_new)
    args = (batch.prompt_ids, batch.prompt_attention, batch.completion_ids, batch.completion_attention, batch.group)
    tokens = int(batch.prompt_attention.sum()) + int(batch.completion_attention.sum())

    linears = [m for m in policy.modules() if isinstance(m, torch.nn.Linear)]
    weights = sum(m.weight.numel() for m in linears)
    flop_fwd = 2 * weights * tokens  # the linear layers' FLOPs for one forward over the packed tokens

    def learner_pass() -> float:
        t0 = time.perf_counter()
        with torch.no_grad():
            shared_prefix_logprobs(ref, *args)
        logp = shared_prefix_logprobs(policy, *args)
        (logp * batch.mask).sum().neg().backward()
        policy.zero_grad(set_to_none=True)
        return time.perf_counter() - t0

    # the same products alone: y = x W^T, then dx = dy W and dW = dy^T x, for every linear layer
    shapes = [(m.in_features, m.out_features) for m in linears]
    xs = {d: torch.randn(tokens, d, dtype=dtype) for d in {i for i, _ in shapes} | {o for _, o in shapes}}
    ws = [torch.randn(o, i, dtype=dtype) for i, o in shapes]

    def gemms(backward: bool) -> float:
        t0 = time.perf_counter()
        for (i, o), w in zip(shapes, ws):
            y = xs[i] @ w.T
            if backward:
                xs[o] @ w  # dx
                xs[o].T @ xs[i]  # dW
            del y
        return time.perf_counter() - t0

    for _ in range(2):  # warm-up: allocator, kernels, threads
        learner_pass(), gemms(False), gemms(True)
    learner, fwd, fwdbwd = [], [], []
    for r in range(a.repeats):
        sides = [("learner", learner_pass), ("fwd", lambda: gemms(False)), ("fwdbwd", lambda: gemms(True))]
        for name, fn in (sides if r % 2 == 0 else sides[::-1]):
            s = fn()
            if name == "learner":  # a reference forward, a policy forward, a backward (two forwards' worth)
                learner.append(4 * flop_fwd / s / 1e9)
            elif name == "fwd":  # the reference forward's products, twice: the policy forward's too
                fwd.append(flop_fwd / s / 1e9)
            else:
                fwdbwd.append(3 * flop_fwd / s / 1e9)
    ceiling = [4 * flop_fwd / (flop_fwd / f + 3 * flop_fwd / b) for f, b in zip(fwd, fwdbwd)]
    # where the learner's time goes by operator: the matrix products against everything else
    # (norms, activations, rotary, attention's softmax, autograd's bookkeeping)
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(3):
            learner_pass()
    ops = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ops)
    share = {k: sum(e.self_cpu_time_total for e in ops if e.key in keys) / total
             for k, keys in (("linear", {"aten::mm", "aten::addmm"}), ("attention", {"aten::bmm"}))}
    mm_rate = 3 * 4 * flop_fwd / (share["linear"] * total / 1e6) / 1e9  # 3 steps profiled
    ratios = [x / c for x, c in zip(learner, ceiling)]
    cpu = cpu_identity()
    print(f"model {a.model}: {weights:,} linear weights, {tokens} packed tokens ({a.prompts} prompts x {a.group}), "
          f"{a.precision}, {a.threads} threads, {a.repeats} rounds interleaved, {cpu}")
    print(f"learner step (ref fwd + fwd + bwd), {4 * flop_fwd / 1e9:.2f} GFLOP: median "
          f"{statistics.median(4 * flop_fwd / 1e9 / x for x in learner) * 1e3:.0f} ms")
    print("| measure | GFLOP/s, median [range] |")
    print("| --- | --- |")
    print(f"| learner's three passes | {_median_range(learner)} |")
    print(f"| its linear products alone, forward | {_median_range(fwd)} |")
    print(f"| its linear products alone, forward + backward | {_median_range(fwdbwd)} |")
    print(f"| ceiling at the learner's mix | {_median_range(ceiling)} |")
    print(f"| learner / ceiling | {statistics.median(ratios):.2f} [{min(ratios):.2f}-{max(ratios):.2f}] |")
    print(f"\nprofiled (3 steps): linear products {100 * share['linear']:.0f}% of the learner's operator time "
          f"({mm_rate:.0f} GFLOP/s while in them), attention products {100 * share['attention']:.0f}%, "
          f"everything else {100 * (1 - share['linear'] - share['attention']):.0f}%")


if __name__ == "__main__":
    main()
