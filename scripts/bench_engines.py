#!/usr/bin/env python
"""Side-by-side speed of rlbench's engines, on one model and one setting.

1. Rollout tokens/s: the HF backend against the vLLM backend, sampled and greedy, in fp32 and bf16,
   with each engine's start time (an `LLM` starts in tens of seconds, HF in one or two).
2. GRPO: samples/s and seconds per step of reference_pipelines/grpo against TRL's GRPOTrainer
   (`pip install -e .[bench]`), at equal group size, batch, max new tokens, steps, threads and KL
   coefficient, in fp32 and in bf16 for both (TRL: `bf16=True`, ours: `precision=bf16`), so every
   ratio compares like with like.

Each measurement runs in its own subprocess (nothing shared, nothing warm), one after another.
Prints a table with the ratios and writes it to docs/benchmarks.md.

    .venv/bin/python scripts/bench_engines.py --model arith-m --steps 30

`--parts rollout,grpo` leaves TRL out (`trl` is the third part); reference GRPO is measured with
each rollout backend.
"""

from __future__ import annotations

import argparse
import json
import platform
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


def child_rollout(backend: str, a: argparse.Namespace) -> dict:
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
                        num_threads=a.threads)
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


def child_ours(a: argparse.Namespace, backend: str = "hf") -> dict:
    from reference_pipelines.grpo.train import GRPOConfig, run

    out = ROOT / "runs" / "bench" / f"ours-{backend}"
    (out / "steps.jsonl").unlink(missing_ok=True)
    cfg = GRPOConfig(task="arith-grpo", model=a.model, steps=a.steps, batch_prompts=a.prompts, group_size=a.group,
                     max_new_tokens=a.max_new, num_threads=a.threads, eval_every=0, kl_coef=0.04, out=str(out),
                     precision=a.precision, rollout_backend=backend)
    run(cfg)
    steps = [json.loads(l) for l in (out / "steps.jsonl").read_text().splitlines()]
    steps = steps[1:]  # first step includes one-off warm-up
    secs = sum(s["step_time"] for s in steps)
    return {"samples_per_s": len(steps) * a.prompts * a.group / secs, "s_per_step": secs / len(steps)}


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


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--model", default="arith-m")
    p.add_argument("--steps", type=int, default=30)
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--max-new", type=int, default=8)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--child", default="")
    p.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="(children only)")
    p.add_argument("--out", default=str(ROOT / "docs" / "benchmarks.md"))
    p.add_argument("--parts", default="rollout,grpo,trl", help="which of rollout, grpo, trl to measure")
    a = p.parse_args()
    if a.child:
        import os

        os.environ.setdefault("RLBENCH_QUIET", "1")
        fn = {"rollout-hf": lambda: child_rollout("hf", a), "rollout-vllm": lambda: child_rollout("vllm", a),
              "grpo-ours": lambda: child_ours(a), "grpo-ours-vllm": lambda: child_ours(a, "vllm"),
              "grpo-trl": lambda: child_trl(a)}[a.child]
        print("RESULT " + json.dumps(fn()), flush=True)
        return

    from rlbench.models.zoo import model_meta, resolve_model

    meta = model_meta(Path(resolve_model(a.model).location)) or {}
    parts = set(a.parts.split(","))
    runs = [(k, p) for k, p in [("rollout-hf", "fp32"), ("rollout-hf", "bf16"), ("rollout-vllm", "fp32"),
                                ("rollout-vllm", "bf16")] if "rollout" in parts]
    runs += [(k, p) for k, p in [("grpo-ours", "fp32"), ("grpo-ours", "bf16"), ("grpo-ours-vllm", "fp32")]
             if "grpo" in parts]
    runs += [(k, p) for k, p in [("grpo-trl", "fp32"), ("grpo-trl", "bf16")] if "trl" in parts]
    res = {}
    for kind, precision in runs:
        print(f"measuring {kind} {precision} ...", flush=True)
        res[(kind, precision)] = _child(kind, a, precision)

    def fmt(r: dict, key: str, spec: str = ".0f") -> str:
        return format(r[key], spec) if key in r else f"n/a ({r.get('error', '?')})"

    def ratio(x: dict, y: dict, key: str, invert: bool = False) -> str:
        if key not in x or key not in y:
            return "n/a"
        return f"{(y[key] / x[key]) if invert else (x[key] / y[key]):.2f}x"

    setting = (f"model `{a.model}` ({meta.get('parameters', 0):,} parameters), {a.prompts} prompts x {a.group} "
               f"completions, max {a.max_new} new tokens, {a.steps} steps, {a.threads} torch threads, KL coefficient "
               f"0.04, {platform.processor() or platform.machine()}, python {platform.python_version()}")
    rows = ["| measure | precision | rlbench | other | ratio (rlbench / other) |", "| --- | --- | --- | --- | --- |"]
    if "rollout" in parts:
        for precision in ("fp32", "bf16"):
            hf, vl = res[("rollout-hf", precision)], res[("rollout-vllm", precision)]
            for mode in ("sampled", "greedy"):
                key = f"{mode}_tokens_per_s"
                rows.append(f"| rollout tokens/s, {mode}: HF backend vs vLLM backend | {precision} | {fmt(hf, key)} | "
                            f"{fmt(vl, key)} | {ratio(hf, vl, key)} |")
            rows.append(f"| engine start, s: HF backend vs vLLM backend | {precision} | {fmt(hf, 'start_s', '.1f')} | "
                        f"{fmt(vl, 'start_s', '.1f')} | {ratio(hf, vl, 'start_s', invert=True)} faster |")
        hf32, hf16 = res[("rollout-hf", "fp32")], res[("rollout-hf", "bf16")]
        rows.append(f"| rollout tokens/s: HF backend bf16 vs fp32 | bf16 / fp32 | {fmt(hf16, 'tokens_per_s')} | "
                    f"{fmt(hf32, 'tokens_per_s')} | {ratio(hf16, hf32, 'tokens_per_s')} |")
    if "grpo" in parts:
        o, v = res[("grpo-ours", "fp32")], res[("grpo-ours-vllm", "fp32")]
        rows.append(f"| GRPO seconds/step: ours, HF rollouts vs vLLM rollouts | fp32 | {fmt(o, 's_per_step', '.3f')} | "
                    f"{fmt(v, 's_per_step', '.3f')} | {ratio(o, v, 's_per_step', invert=True)} faster |")
    for ours_p, trl_p in (("fp32", "fp32"), ("bf16", "bf16"), ("bf16", "fp32")):
        if not {"grpo", "trl"} <= parts:
            break
        o, t = res[("grpo-ours", ours_p)], res[("grpo-trl", trl_p)]
        label = ours_p if ours_p == trl_p else f"{ours_p} / {trl_p}"
        rows.append(f"| GRPO samples/s: ours vs TRL GRPOTrainer | {label} | {fmt(o, 'samples_per_s', '.1f')} | "
                    f"{fmt(t, 'samples_per_s', '.1f')} | {ratio(o, t, 'samples_per_s')} |")
        rows.append(f"| GRPO seconds/step: ours vs TRL GRPOTrainer | {label} | {fmt(o, 's_per_step', '.3f')} | "
                    f"{fmt(t, 's_per_step', '.3f')} | {ratio(o, t, 's_per_step', invert=True)} faster |")
    table = "\n".join(rows)
    print(setting)
    print(table)
    stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    section = (f"\n## Engines, measured {stamp}\n\nSetting: {setting}.\n\n"
               f"Command: `.venv/bin/python scripts/bench_engines.py --model {a.model} --steps {a.steps}"
               f"{'' if a.parts == 'rollout,grpo,trl' else ' --parts ' + a.parts}`\n\n"
               f"{table}\n")
    out = Path(a.out)
    head = "# rlbench benchmarks\n\nSpeed measured by `scripts/bench_engines.py`; each run appends a section.\n"
    text = out.read_text() if out.exists() else head
    out.write_text(text + section)
    print(f"written: {out}")


if __name__ == "__main__":
    main()
