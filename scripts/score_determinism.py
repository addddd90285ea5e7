#!/usr/bin/env python
"""Does a score depend on the CPU it is computed on? The same checkpoint, scored by the harness on
one task's hidden split in fresh processes that differ only in torch's thread count and the
evaluation batch size, item by item.

Sampling is seeded per item (rlbench/engines/hf_generate.py), so any difference comes from float
arithmetic: a different reduction order moves a logit by ~1e-7, which flips a sampled or greedy
token only at a near tie. The table counts the items whose sampled pass@1 or greedy reward moved
and the change of the split's score, against the first setting.

    .venv/bin/python scripts/score_determinism.py arith-grpo --split test
    .venv/bin/python scripts/score_determinism.py arith-grpo --model arith-m --settings 1:256,2:256,2:64

Splits come from the task file's public seed (RLBENCH_SPLIT_SEED=public), nothing is cached.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child(args: argparse.Namespace) -> None:
    import torch

    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.tasks.registry import load_task

    torch.set_num_threads(args.threads)
    task = load_task(args.task, [f"eval.batch_size={args.batch}"] if args.batch else [])
    r = evaluate_model(args.model or task.model.base, task, (args.split,), use_cache=False)
    s = r["scores"][args.split]
    Path(args.out).write_text(json.dumps({"pass_at_1": s["pass_at_1"], "greedy": s["greedy"],
                                          "per_item": s["per_item"], "greedy_per_item": s["greedy_per_item"],
                                          "threads": torch.get_num_threads(), "seconds": r["eval_seconds"]}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("task")
    ap.add_argument("--model", default="", help="model reference (default: the task's base)")
    ap.add_argument("--split", default="test")
    ap.add_argument("--settings", default="2:0,1:0,2:0",
                    help="threads:batch per fresh process (batch 0: the task's eval.batch_size); "
                         "the first is the reference, a repeat of it checks a fresh process")
    ap.add_argument("--json", default="", help="also write the rows here")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--threads", type=int, default=1, help=argparse.SUPPRESS)
    ap.add_argument("--batch", type=int, default=0, help=argparse.SUPPRESS)
    ap.add_argument("--out", default="", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        _child(args)
        return
    settings = [tuple(int(x) for x in s.split(":")) for s in args.settings.split(",") if s]
    if len(settings) < 2 or any(len(s) != 2 or s[0] < 1 or s[1] < 0 for s in settings):
        ap.error("--settings: two or more threads:batch pairs, threads >= 1, batch >= 0")
    runs = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "RLBENCH_SPLIT_SEED": "public", "RLBENCH_QUIET": "1"}
        for i, (threads, batch) in enumerate(settings):
            out = Path(tmp) / f"{i}.json"
            env_i = {**env, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
            cmd = [sys.executable, __file__, args.task, "--child", "--threads", str(threads), "--batch", str(batch),
                   "--split", args.split, "--out", str(out)] + (["--model", args.model] if args.model else [])
            print(f"scoring with {threads} thread(s), batch {batch or 'default'} ...", flush=True)
            proc = subprocess.run(cmd, cwd=ROOT, env=env_i, capture_output=True, text=True)
            if proc.returncode != 0:
                sys.exit(f"run {i} failed:\n{proc.stderr[-2000:]}")
            runs.append(json.loads(out.read_text()))
    ref = runs[0]
    n = len(ref["per_item"])
    print(f"\n{args.task} {args.split} (n={n}), model {args.model or 'base'}; against the first setting:")
    print(f"{'threads:batch':>14} {'pass@1 %':>9} {'greedy %':>9} {'items moved (sampled)':>22} "
          f"{'items moved (greedy)':>21} {'seconds':>8}")
    rows = []
    for (threads, batch), r in zip(settings, runs):
        moved = sum(a != b for a, b in zip(ref["per_item"], r["per_item"]))
        gmoved = sum(a != b for a, b in zip(ref["greedy_per_item"], r["greedy_per_item"]))
        rows.append({"threads": threads, "batch": batch, "pass_at_1": r["pass_at_1"], "greedy": r["greedy"],
                     "moved": moved, "greedy_moved": gmoved, "n": n, "seconds": r["seconds"]})
        print(f"{threads:>7}:{batch or 'task':<6} {100 * r['pass_at_1']:>9.2f} {100 * r['greedy']:>9.2f} "
              f"{moved:>15} ({100 * moved / n:.1f}%) {gmoved:>14} ({100 * gmoved / n:.1f}%) {r['seconds']:>8.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"task": args.task, "split": args.split, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
