#!/usr/bin/env python
"""Pick a zoo recipe's `pretrain.steps`: pretrain it once, save the model at every calibration
point in a window of steps, and score each saved model with the harness on a task's dev split
(public seed). The skill of a tiny model appears within a few dozen steps, so a base that should
sit in a skill window (arith-s: test pass@1 15-30%) is chosen here, once, on one machine; the
chosen build is then pinned (`rlbench models pin NAME`) and shipped, never rebuilt per machine.

    .venv/bin/python scripts/calibrate_base.py arith-s arith-grpo --from 1050 --to 1200

Prints step, loss, calibration accuracy and dev pass@1 (sampled and greedy) per saved point.
"""

from __future__ import annotations

import argparse
import os
import tempfile
from pathlib import Path


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("recipe")
    ap.add_argument("task")
    ap.add_argument("--from", dest="start", type=int, required=True)
    ap.add_argument("--to", dest="stop", type=int, required=True)
    ap.add_argument("--split", default="dev")
    ap.add_argument("--calib", default="0,1", help="score only points whose calibration accuracy lies in LOW,HIGH")
    ap.add_argument("overrides", nargs="*", help="recipe overrides, e.g. pretrain.lr=1e-3")
    args = ap.parse_intermixed_args()
    os.environ.setdefault("RLBENCH_SPLIT_SEED", "public")

    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.models.pretrain import pretrain
    from rlbench.models.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer
    from rlbench.models.zoo import load_recipe
    from rlbench.tasks.registry import load_task

    recipe = load_recipe(args.recipe, [f"pretrain.max_steps={args.stop}", "pretrain.steps=null",
                                       "pretrain.target_accuracy=null", *args.overrides])
    task = load_task(args.task)
    tokenizer = build_char_tokenizer(recipe.alphabet or DEFAULT_ALPHABET)
    with tempfile.TemporaryDirectory() as tmp:
        saved: list[tuple[int, Path]] = []

        def keep(step: int, model) -> None:
            if step >= args.start:
                path = Path(tmp) / f"step-{step}"
                model.save_pretrained(path)
                tokenizer.save_pretrained(path)
                saved.append((step, path))

        _, log = pretrain(recipe, tokenizer, on_eval=keep)
        curve = {c["step"]: c for c in log.curve}
        print(f"{'step':>6} {'loss':>7} {'calib':>7} {args.split + ' pass@1 %':>16} {'greedy %':>9}")
        low, high = (float(x) for x in args.calib.split(","))
        for step, path in saved:
            if not low <= curve[step]["calib_greedy_acc"] <= high:
                continue
            s = evaluate_model(str(path), task, (args.split,), use_cache=False)["scores"][args.split]
            c = curve[step]
            greedy = "-" if s["greedy"] is None else f"{100 * s['greedy']:.1f}"
            detail = (s.get("detail") or {}).get("greedy")  # what the task's reward reports beside its mean
            print(f"{step:>6} {c['loss']:>7.3f} {100 * c['calib_greedy_acc']:>6.1f}% {100 * s['pass_at_1']:>15.1f} "
                  f"{greedy:>9}" + (f"  greedy {detail}" if detail else ""), flush=True)


if __name__ == "__main__":
    main()
