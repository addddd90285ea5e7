#!/usr/bin/env python
"""Side-by-side speed of rlbench's engines, on one model and one setting.

1. Rollout tokens/s: the HF backend against the vLLM backend, sampled and greedy, in fp32 and bf16,
   with each engine's start time (an `LLM` starts in tens of seconds, HF in one or two).
2. GRPO (`grpo`): seconds per step of reference_pipelines/grpo with each rollout backend.
3. TRL (`trl`): samples/s of reference_pipelines/grpo against TRL's GRPOTrainer
   (`pip install -e .[bench]`), at equal group size, batch, max new tokens, steps, threads and KL
   coefficient, in fp32 and in bf16 for both (TRL: `bf16=True`, ours: `precision=bf16`), so every
   ratio compares like with like. Ours picks its attention kernel by measurement
   (`attention=measure`, rlbench/engines/kernel_choice.py); the `auto` part adds ours with the
   precision measured too (`precision=measure`) against TRL at its default, bf16.
4. Prefill (`prefill`): ours with each prompt run once for its group (the rollout's prefill, with
   finished rows leaving the batch, and the learner's passes, `share_prompt`) against once per
   completion (transformers' `generate` and a learner pass per full sequence), as rollout tokens/s and as GRPO
   samples/s, with where a GRPO step's time goes (rollout, reward, learner, weight sync) per side.

Each measurement runs in its own subprocess (nothing shared, nothing warm). Noise on a shared
machine moves one run by more than the engines differ (measured: ours/TRL 0.16x in one pass and
0.83x in the next), so the sides are interleaved: each of `--repeats` rounds runs every side once,
the order reversed every other round (ABBA...), a ratio is taken within its round, and the table
shows medians with their range. It names the CPU and is appended to docs/benchmarks.md.

    .venv/bin/python scripts/bench_engines.py --model arith-m --steps 30 --repeats 5 --parts trl,auto
"""

from __future__ import annotations

import argparse
import json
import math
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _child(kind: str, args: argparse.Namespace, precision: str = "fp32") -> dict:
    args = argparse.Namespace(**{**vars(args), "precision": precision})
    cmd = [sys.executable, __file__, "--child", kind, "--model", args.model, "--steps", str(args.steps),
           "--prompts", str(args.prompts), "--group", str(args.group), "--max-new", str(args.max_new),
           "--threads", str(args.threads), "--precision", args.precision]
    proc = subprocess.run(cmd, capture_output=True, text=True, cwd=ROOT)
    lines = [l for l in proc.stdout.splitlines() if l.startswith("RESULT ")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-3:]
        return {"error": " | ".join(tail) or f"exit {proc.returncode}"}
    return json.loads(lines[-1][len("RESULT "):])


def _prompts(n: int) -> tuple[list[str], list[str]]:
    from rlbench.data.splits import prepare_data
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task("arith-grpo")
    train = prepare_data(task, task_dir(task.name)).splits["train"]
    return [it["prompt"] for it in train[:n]], [it["answer"] for it in train[:n]]


def child_rollout(backend: str, a: argparse.Namespace, share: bool = True) -> dict:
    import torch

    from rlbench.engines.rollout import RolloutEngine, vllm_available
    from rlbench.engines.sampling import SamplingParams
    from rlbench.models.zoo import resolve_model

    if backend == "vllm" and not vllm_available():
        return {"error": "vllm not installed"}
    torch.set_num_threads(a.threads)
    path = resolve_model(a.model).location
    t0 = time.perf_counter()
    eng = RolloutEngine(path, backend=backend, batch_size=a.prompts * a.group, precision=a.precision,
                        num_threads=a.threads, share_prefill=share)
    start_s = time.perf_counter() - t0
    prompts, _ = _prompts(a.prompts)
    out: dict = {"start_s": start_s}
    for mode in ("sampled", "greedy"):
        def params(i: int) -> SamplingParams:
            if mode == "greedy":
                return SamplingParams(n=1, greedy=True, max_new_tokens=a.max_new, seed=i)
            return SamplingParams(n=a.group, max_new_tokens=a.max_new, seed=i)

        reps = prompts if mode == "sampled" else prompts * a.group  # as many sequences either way
        eng.generate(reps, params(0))  # warm-up
        tokens, t0 = 0, time.perf_counter()
        for i in range(a.steps):
            res = eng.generate(reps, params(i + 1))
            tokens += sum(len(c.token_ids) + 1 for g in res for c in g)
        out[f"{mode}_tokens_per_s"] = tokens / (time.perf_counter() - t0)
    if backend == "vllm":
        eng.close()
    out["tokens_per_s"] = out["sampled_tokens_per_s"]
    return out


STEP_PARTS = ("time_rollout", "time_reward", "time_learn", "time_sync")


def child_ours(a: argparse.Namespace, backend: str = "hf", share: bool = True) -> dict:
    from reference_pipelines.grpo.train import GRPOConfig, run

    out = ROOT / "runs" / "bench" / f"ours-{backend}{'' if share else '-noshare'}"
    (out / "steps.jsonl").unlink(missing_ok=True)
    cfg = GRPOConfig(task="arith-grpo", model=a.model, steps=a.steps, batch_prompts=a.prompts, group_size=a.group,
                     max_new_tokens=a.max_new, num_threads=a.threads, eval_every=0, kl_coef=0.04, out=str(out),
                     # ours times its kernels on this machine (`measure`); the auto part leaves it the
                     # precision too
                     precision="measure" if a.precision == "auto" else a.precision, attention="measure",
                     rollout_backend=backend, share_prompt=share)
    summary = run(cfg)
    steps = [json.loads(l) for l in (out / "steps.jsonl").read_text().splitlines()]
    steps = steps[1:]  # first step includes one-off warm-up
    secs = sum(s["step_time"] for s in steps)
    k = summary["kernels"]
    return {"samples_per_s": len(steps) * a.prompts * a.group / secs, "s_per_step": secs / len(steps),
            "kernels": f"{k['precision']}/{k['attention']} ({a.precision})",
            **{part: statistics.median(s[part] for s in steps) for part in STEP_PARTS}}


def child_trl(a: argparse.Namespace) -> dict:
    import datasets
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlbench.models.zoo import resolve_model
    from rlbench.rewards import exact_int

    torch.set_num_threads(a.threads)
    path = resolve_model(a.model).location
    prompts, answers = _prompts(max(a.prompts * (a.steps + 1), a.prompts))
    ds = datasets.Dataset.from_dict({"prompt": prompts, "answer": answers})

    def reward(completions, answer, **_):
        return [exact_int(c, ans) for c, ans in zip(completions, answer)]

    times: list[float] = []

    class Timer(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            self.t = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            times.append(time.perf_counter() - self.t)

    cfg = GRPOConfig(output_dir=str(ROOT / "runs" / "bench" / "trl"), use_cpu=True, max_steps=a.steps,
                     per_device_train_batch_size=a.prompts * a.group, num_generations=a.group,
                     max_completion_length=a.max_new, learning_rate=3e-4, beta=0.04, temperature=1.0,
                     logging_steps=10_000, save_strategy="no", report_to="none", seed=0,
                     gradient_accumulation_steps=1, dataloader_num_workers=0, disable_tqdm=True,
                     bf16=a.precision == "bf16")
    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=cfg, train_dataset=ds, processing_class=tok,
                          callbacks=[Timer()])
    trainer.train()
    steps = times[1:]
    secs = sum(steps)
    return {"samples_per_s": len(steps) * a.prompts * a.group / secs, "s_per_step": secs / len(steps)}


# each comparison: (label, precision label, side A, side B, key, A is better when larger)
Side = tuple[str, str]  # (child kind, precision)


def comparisons(parts: set[str]) -> list[tuple[str, str, Side, Side, str, bool]]:
    rows: list[tuple[str, str, Side, Side, str, bool]] = []
    if "rollout" in parts:
        for p in ("fp32", "bf16"):
            for mode in ("sampled", "greedy"):
                rows.append((f"rollout tokens/s, {mode}: HF backend vs vLLM backend", p, ("rollout-hf", p),
                             ("rollout-vllm", p), f"{mode}_tokens_per_s", True))
            rows.append(("engine start, s: HF backend vs vLLM backend", p, ("rollout-hf", p), ("rollout-vllm", p),
                         "start_s", False))
        rows.append(("rollout tokens/s: HF backend bf16 vs fp32", "bf16 / fp32", ("rollout-hf", "bf16"),
                     ("rollout-hf", "fp32"), "tokens_per_s", True))
    if "grpo" in parts:
        rows.append(("GRPO seconds/step: ours, HF rollouts vs vLLM rollouts", "fp32", ("grpo-ours", "fp32"),
                     ("grpo-ours-vllm", "fp32"), "s_per_step", False))
    if "trl" in parts:
        for p in ("fp32", "bf16"):
            rows.append(("GRPO samples/s: ours vs TRL GRPOTrainer", p, ("grpo-ours", p), ("grpo-trl", p),
                         "samples_per_s", True))
    if "prefill" in parts:
        for p in ("fp32", "bf16"):
            rows.append(("rollout tokens/s, sampled: ours (prefill once per group, finished rows dropped) vs transformers generate", p,
                         ("rollout-hf", p), ("rollout-hf-noshare", p), "sampled_tokens_per_s", True))
            rows.append(("GRPO samples/s: ours, prompt once per group (rollout and learner) vs once per completion",
                         p, ("grpo-ours", p), ("grpo-ours-noshare", p), "samples_per_s", True))
    if "auto" in parts:  # ours with the kernels it measures itself against TRL at its own default (bf16)
        rows.append(("GRPO samples/s: ours (precision and attention measured) vs TRL GRPOTrainer (bf16, its default)",
                     "auto / bf16", ("grpo-ours", "auto"), ("grpo-trl", "bf16"), "samples_per_s", True))
    return rows


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="arith-m")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=5, help="rounds; each round runs every side once, ABAB...")
    p.add_argument("--child", default="")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16", "auto"], help="(children only)")
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--parts", default="rollout,grpo,trl,auto", help="which of rollout, grpo, trl, auto, prefill to measure")
    a = p.parse_args()
    if a.child:
        import os

        os.environ.setdefault("RLBENCH_QUIET", "1")
        fn = {"rollout-hf": lambda: child_rollout("hf", a), "rollout-vllm": lambda: child_rollout("vllm", a),
              "grpo-ours": lambda: child_ours(a), "grpo-ours-vllm": lambda: child_ours(a, "vllm"),
              "grpo-trl": lambda: child_trl(a), "rollout-hf-noshare": lambda: child_rollout("hf", a, share=False),
              "grpo-ours-noshare": lambda: child_ours(a, share=False)}[a.child]
        print("RESULT " + json.dumps(fn()), flush=True)
        return
    parts = set(a.parts.split(","))
    unknown = parts - {"rollout", "grpo", "trl", "auto", "prefill"}
    if unknown or a.repeats < 1:
        p.error(f"--parts: unknown {sorted(unknown)}" if unknown else "--repeats must be >= 1")
    if parts & {"trl", "auto"}:
        import importlib.util

        if importlib.util.find_spec("trl") is None:
            p.error("the trl and auto parts need TRL: pip install -e .[bench]")

    from rlbench.benchmarking import interleaved, median_range, ratios
    from rlbench.engines.kernel_choice import cpu_identity

    from rlbench.models.zoo import model_meta, resolve_model

    meta = model_meta(Path(resolve_model(a.model).location)) or {}
    rows = comparisons(parts)
    sides: list[Side] = list(dict.fromkeys(side for r in rows for side in (r[2], r[3])))
    # every round measures every side once, in alternating order; a ratio is taken within its round
    res = interleaved(sides, a.repeats, lambda side: _child(side[0], a, side[1]),
                      on_run=lambda rnd, side: print(f"round {rnd + 1}/{a.repeats}: {side[0]} {side[1]} ...", flush=True))

    def cell(side: Side, key: str, spec: str) -> str:
        vals = [r[key] for r in res[side] if key in r]
        if not vals:
            return f"n/a ({next((r['error'] for r in res[side] if 'error' in r), '?')})"
        return median_range(vals, spec)

    table = ["| measure | precision | rlbench, median [range] | other, median [range] | ratio, median [range] |",
             "| --- | --- | --- | --- | --- |"]
    for label, prec, side_a, side_b, key, larger_better in rows:
        spec = ".3f" if key == "s_per_step" else ".1f" if key in ("start_s", "samples_per_s") else ".0f"
        va, vb = ([r.get(key, math.nan) for r in res[side]] for side in (side_a, side_b))
        within = ratios(vb, va) if larger_better else ratios(va, vb)
        ratio = median_range(within, ".2f") + ("x" if larger_better else "x faster") if within else "n/a"
        table.append(f"| {label} | {prec} | {cell(side_a, key, spec)} | {cell(side_b, key, spec)} | {ratio} |")
    grpo_sides = [side for side in sides if side[0].startswith("grpo-ours") and
                  any(STEP_PARTS[0] in r for r in res[side])]
    if grpo_sides:  # where a step's time goes, per side (ms, medians over rounds of per-round medians)
        table += ["", "| ours: a GRPO step's time, ms (median [range]) | precision | " + " | ".join(
                      p.removeprefix("time_") for p in STEP_PARTS) + " | step |",
                  "| --- | --- |" + " --- |" * (len(STEP_PARTS) + 1)]
        for side in grpo_sides:
            ms = {key: [1000 * r[key] for r in res[side] if key in r] for key in (*STEP_PARTS, "s_per_step")}
            table.append(f"| {side[0]} | {side[1]} | " + " | ".join(median_range(ms[key], ".0f") for key in ms) + " |")
    picks = sorted({r["kernels"] for side in sides for r in res[side] if r.get("kernels")})
    setting = (f"model `{a.model}` ({meta.get('parameters', 0):,} parameters), {a.prompts} prompts x {a.group} "
               f"completions, max {a.max_new} new tokens, {a.steps} steps, {a.threads} torch threads, KL coefficient "
               f"0.04, {a.repeats} rounds interleaved, {cpu_identity()}, python {platform.python_version()}")
    if picks:
        setting += f"; kernels ours picked by measurement: {', '.join(picks)}"
    text = "\n".join(table)
    print(setting)
    print(text)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = (f"\n## Engines, measured {stamp}\n\nSetting: {setting}.\n\n"
               f"Command: `.venv/bin/python scripts/bench_engines.py --model {a.model} --steps {a.steps} "
               f"--repeats {a.repeats} --parts {a.parts}`\n\n{text}\n")
    out = Path(a.out)
    head = "# rlbench benchmarks\n\nSpeed measured by `scripts/bench_engines.py`; each run appends a section.\n"
    out.write_text((out.read_text() if out.exists() else head) + section)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
