"""The real tier's GPU check: one short run, on a machine with a GPU and no hub, of every part a
real-tier cell uses on its GPU, with the numbers that size the tasks.

    python scripts/gpu_check.py                      # on a GPU: a random-init model of Qwen2.5-0.5B's shape
    python scripts/gpu_check.py --device cpu --size tiny   # the same steps on a CPU (what CI runs)

Steps, each timed and reported even when another fails:
  1. model     a random-init Qwen2 with the real 0.5B configuration (hidden 896, 24 layers, 14 heads,
               2 KV heads, vocab 151,936, tied embeddings), saved as a hub folder is, bf16 on GPU
  2. rollout   the rollout engine (vLLM where installed on CUDA, else HF batched): tokens/s
  3. learner   one DeepSpeed optimizer step on the rollout's completions: step time
  4. sync      the learner's weights into the rollout engine in place, and generation again
  5. sandbox   a command in the cell's bubblewrap sandbox, given the cell's GPUs: what torch sees there
  6. scoring   the harness's evaluation of the model on gsm8k-grpo@standin's test split, on the device
Peak GPU memory after each step. Exit status 1 when a step failed. Nothing here reaches a network.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

QWEN25_05B = dict(hidden_size=896, intermediate_size=4864, num_hidden_layers=24, num_attention_heads=14,
                  num_key_value_heads=2, vocab_size=151936, max_position_embeddings=32768, rope_theta=1_000_000.0,
                  tie_word_embeddings=True, rms_norm_eps=1e-6)
TINY = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2,
            vocab_size=512, max_position_embeddings=1024, tie_word_embeddings=True)
STANDIN = ROOT / "tasks" / "gsm8k-grpo" / "standin" / "model"


def build_model(out: Path, size: str, device: str) -> dict[str, Any]:
    """The real configuration at random init, with the stand-in's BPE tokenizer and chat template
    (its 512 tokens index the first rows of the larger table)."""
    import torch
    from transformers import AutoTokenizer, Qwen2Config, Qwen2ForCausalLM

    tokenizer = AutoTokenizer.from_pretrained(STANDIN)
    shape = QWEN25_05B if size == "0.5b" else TINY
    config = Qwen2Config(**shape, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
                         bos_token_id=None)
    torch.manual_seed(0)
    model = Qwen2ForCausalLM(config)
    if device == "cuda":
        model = model.to(torch.bfloat16)
    model.save_pretrained(str(out), safe_serialization=True)
    tokenizer.save_pretrained(str(out))
    return {"parameters": sum(p.numel() for p in model.parameters()),
            "bytes": sum(f.stat().st_size for f in out.iterdir())}


def prompts(n: int) -> list[str]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(STANDIN)
    return [tok.apply_chat_template([{"role": "user", "content": f"Tom has {10 + i} apples and buys {i % 7 + 2} more. "
                                      "How many apples does he have now?"}], tokenize=False, add_generation_prompt=True)
            for i in range(n)]


def main(argv: list[str] | None = None) -> int:
    import torch

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", choices=("cuda", "cpu"), default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--size", choices=("0.5b", "tiny"), default="0.5b")
    ap.add_argument("--prompts", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--out", type=Path, default=None, help="where the model and report.json go (default: a temp folder)")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("--device cuda: torch sees no CUDA GPU here", file=sys.stderr)
        return 2
    out = args.out or Path(tempfile.mkdtemp(prefix="rlbench-gpu-check-"))
    out.mkdir(parents=True, exist_ok=True)
    # one process: a launcher's distributed settings left in the environment (a port another process
    # still holds) would make the learner's rendezvous fail; it picks its own free port
    for key in ("MASTER_ADDR", "MASTER_PORT", "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_SIZE"):
        os.environ.pop(key, None)
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("RLBENCH_HOME", str(out / "home"))
    report: dict[str, Any] = {"device": args.device, "size": args.size, "torch": torch.__version__,
                              "gpu": torch.cuda.get_device_name(0) if args.device == "cuda" else None, "steps": {}}
    state: dict[str, Any] = {}

    def step(name: str, fn: Callable[[], dict[str, Any]]) -> None:
        if args.device == "cuda":
            torch.cuda.reset_peak_memory_stats()
        t0 = time.monotonic()
        try:
            rec = {"ok": True, **fn()}
        except Exception as exc:  # noqa: BLE001 - a failed step is reported, the others still run
            rec = {"ok": False, "error": f"{type(exc).__name__}: {exc}", "trace": traceback.format_exc()[-2000:]}
        rec["seconds"] = round(time.monotonic() - t0, 2)
        if args.device == "cuda":
            rec["peak_gpu_gib"] = round(torch.cuda.max_memory_allocated() / 2 ** 30, 2)
        report["steps"][name] = rec
        shown = {k: v for k, v in rec.items() if k != "trace"}
        print(f"{name:8s} {json.dumps(shown)}", flush=True)

    model_dir = out / "model"

    def rollout() -> dict[str, Any]:
        from rlbench.engines.rollout import RolloutEngine, vllm_available
        from rlbench.engines.sampling import SamplingParams

        backend = "vllm" if args.device == "cuda" and vllm_available() else "hf"
        engine = RolloutEngine(str(model_dir), backend=backend, need_in_place_update=True, device=args.device,
                               precision="bf16" if args.device == "cuda" else "fp32")
        state["engine"] = engine
        sampling = SamplingParams(n=1, temperature=1.0, max_new_tokens=args.tokens, seed=0)
        t0 = time.monotonic()
        done = engine.generate(prompts(args.prompts), sampling)
        seconds = time.monotonic() - t0
        tokens = sum(len(c.token_ids) for group in done for c in group)
        state["completions"] = done
        return {"backend": engine.backend, "tokens": tokens, "tokens_per_s": round(tokens / seconds, 1)}

    def learner() -> dict[str, Any]:
        from reference_pipelines.common import build_sequences
        from rlbench.engines.learner import Learner, LearnerConfig

        lrn = Learner(str(model_dir), LearnerConfig(zero_stage=0, precision="bf16" if args.device == "cuda" else "fp32",
                                                   reference_model=False), device=args.device)
        state["learner"] = lrn
        done = state["completions"]
        batch = build_sequences(lrn.tokenizer, prompts(args.prompts), [g[0].token_ids for g in done], args.tokens)

        def loss(l: Learner):
            lp = l.logprobs(batch.input_ids, batch.attention_mask)
            mask = batch.mask.to(lp.device)
            return -(lp * mask).sum() / mask.sum().clamp(min=1), {}

        t0 = time.monotonic()
        stats = lrn.train_step(loss)
        if args.device == "cuda":
            torch.cuda.synchronize()
        return {"step_s": round(time.monotonic() - t0, 3), "loss": round(stats["loss"], 4)}

    def sync() -> dict[str, Any]:
        from rlbench.engines.sampling import SamplingParams

        engine, lrn = state["engine"], state["learner"]
        t0 = time.monotonic()
        n = engine.update_weights(lrn.export_weights())
        sync_s = time.monotonic() - t0
        again = engine.generate(prompts(4), SamplingParams(n=1, greedy=True, max_new_tokens=16, seed=0))
        return {"tensors": n, "sync_s": round(sync_s, 3), "generated_after": sum(len(g[0].token_ids) for g in again)}

    def sandbox() -> dict[str, Any]:
        from rlbench.sandbox.gpus import assigned_gpus
        from rlbench.sandbox.runner import Sandbox, SandboxConfig

        ws = out / "workspace"
        ws.mkdir(exist_ok=True)
        os.chmod(ws, 0o777)
        box = Sandbox(ws, SandboxConfig(mode="bwrap", memory_gb=64), 120, 2, visible_gpus=assigned_gpus())
        run = box.run("python -c 'import torch; n = torch.cuda.device_count(); "
                      "print(n, torch.cuda.get_device_name(0) if n else \"-\")'", timeout=120)
        if run.returncode != 0:
            raise RuntimeError(f"exit {run.returncode}: {run.stderr[-500:]}")
        count, _, name = run.stdout.strip().partition(" ")
        if args.device == "cuda" and int(count) < 1:
            raise RuntimeError("the sandboxed command sees no GPU")
        return {"gpus_given": [g.minor for g in box.gpus], "gpus_seen": int(count), "name": name}

    def scoring() -> dict[str, Any]:
        from rlbench.evaluation.baseline import evaluate_model
        from rlbench.tasks.registry import load_task

        os.environ.setdefault("RLBENCH_TASKS", str(ROOT / "tasks"))
        task = load_task("gsm8k-grpo@standin")
        t0 = time.monotonic()
        res = evaluate_model(str(model_dir), task, ("test",), device=args.device, use_cache=False)
        return {"pass_at_1": res["scores"]["test"]["pass_at_1"], "n": res["scores"]["test"]["n"],
                "eval_s": round(time.monotonic() - t0, 2)}

    step("model", lambda: build_model(model_dir, args.size, args.device))
    step("rollout", rollout)
    step("learner", learner)
    step("sync", sync)
    step("sandbox", sandbox)
    step("scoring", scoring)
    (out / "report.json").write_text(json.dumps(report, indent=1))
    failed = [k for k, v in report["steps"].items() if not v["ok"]]
    print(f"report: {out / 'report.json'}; " + (f"FAILED: {', '.join(failed)}" if failed else "every step passed"))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
