"""Agents that hand the harness designs, for the sweep tests (found as `sweep_agents:Class`)."""

from __future__ import annotations

from typing import Any

import yaml

from rlbench.agents.base import Agent

# a stand-in trainer: copies the base model (zeroing its weights for `broken`), reports the dev
# score it claims, and logs each run, so a test can tell what the harness trusted and what ran
FAKE_TRAIN = '''
import json, os, shutil, sys, time
from pathlib import Path

args = dict(a.split("=", 1) for a in sys.argv[1:])
quality, claim = args["variant"].split(":")
root = Path(os.environ["RLBENCH_WORKSPACE"])
out = Path(args["out"])
out.mkdir(parents=True, exist_ok=True)
with open(root / "trial_runs.log", "a") as f:
    f.write(f"{args['variant']} seed={args['seed']} threads={args['num_threads']} limit={args['train_limit']}\\n")
for step in range(1, int(args.get("reports", 3)) + 1):
    with open(out / "steps.jsonl", "a") as f:
        f.write(json.dumps({"step": step, "dev_greedy": float(claim)}) + "\\n")
    time.sleep(float(args.get("pause", 0)))
shutil.copytree(root / "model", out / "checkpoint")
if quality == "broken":
    from safetensors.torch import load_file, save_file
    path = out / "checkpoint" / "model.safetensors"
    save_file({k: v.zero_() for k, v in load_file(path).items()}, path, metadata={"format": "pt"})
if quality == "crash":
    raise SystemExit("this trial fails on purpose")
'''


def design(variants: list[str], scheduler: str = "fifo", **hyper: Any) -> dict[str, Any]:
    return {"algorithm": "custom", "entry_point": "fake_train.py", "hyperparameters": {"pause": 0, **hyper},
            "preprocessing": {"train_limit": 40}, "evaluation": {"every": 1, "prompts": 10},
            "search_space": {"variant": {"grid": variants}},
            "sweep": {"num_samples": 1, "scheduler": scheduler, "grace_period": 1, "reduction_factor": 2,
                      "max_concurrent": 1}}


class Sweeper(Agent):
    """Sweeps a design whose most confident trial is broken, then one under ASHA; submits the best."""

    def run(self, description: str, tools: Any) -> None:
        tools.write("fake_train.py", FAKE_TRAIN)
        tools.write("bad.yaml", yaml.safe_dump({**design(["good:0.1"]), "algorithm": "ppo2"}))
        tools.sweep("bad.yaml")  # refused: does not count
        tools.write("design.yaml", yaml.safe_dump(design(["good:0.1", "broken:0.99", "crash:0.5"])))
        first = tools.sweep("design.yaml")
        tools.write("asha.yaml", yaml.safe_dump(design(["good:0.9", "good:0.5", "good:0.2", "good:0.1"],
                                                       scheduler="asha", reports=4)))
        tools.sweep("asha.yaml")
        tools.sweep("asha.yaml")  # over the task's limit of two
        if first.get("ok"):
            tools.submit(first["best"]["checkpoint"])


class GradeCli(Agent):
    """Submits the base model from a shell, through `./grade`, with a recipe that trains nothing."""

    def run(self, description: str, tools: Any) -> None:
        tools.exec("./grade sweep")  # a usage error, not a request
        tools.exec("./grade submit model --recipe 'echo seed={seed} > seed.txt'")


REPORT_TRAIN = '''"""A stand-in GRPO run: group advantages with a KL penalty (kl_coef), logging a rising reward."""
import json, math, os
from pathlib import Path

kl_coef = 0.02
out = Path("runs/a")
out.mkdir(parents=True, exist_ok=True)
with open(out / "steps.jsonl", "w") as f:
    for step in range(1, 21):
        f.write(json.dumps({"step": step, "reward_mean": 0.2 + 0.02 * step, "kl": kl_coef * math.log(step + 1),
                            "loss": 1.0 / step, **({"dev_greedy": 0.3 + 0.01 * step} if step % 5 == 0 else {})}) + "\\n")
'''


class Reporter(Agent):
    """Leaves what a run report shows: code with RL methods in it, a failed command then a good one,
    a step log, a refused and a valid submission."""

    def run(self, description: str, tools: Any) -> None:
        tools.write("train.py", REPORT_TRAIN)
        tools.exec("python no_such_script.py")  # fails
        tools.exec("python train.py")  # recovers
        tools.submit("runs/a")  # refused: not a checkpoint
        tools.submit("model", recipe="python train.py")


# a trial that reports one dev line and then burns CPU for `burn` seconds (the CPU-limit test)
BURN_TRAIN = '''
import json, sys, time
from pathlib import Path

args = dict(a.split("=", 1) for a in sys.argv[1:])
out = Path(args["out"])
out.mkdir(parents=True, exist_ok=True)
(out / "steps.jsonl").write_text(json.dumps({"step": 1, "dev_greedy": 0.1}) + "\\n")
end = time.process_time() + float(args["burn"])
while time.process_time() < end:
    pass
'''


class SweepBurner(Agent):
    """Sweeps one trial that burns `burn` CPU seconds, then submits the base model."""

    def run(self, description: str, tools: Any) -> None:
        tools.write("burn_train.py", BURN_TRAIN)
        tools.write("burn.yaml", yaml.safe_dump({**design(["a"], burn=self.options.get("burn", 200)),
                                                 "entry_point": "burn_train.py",
                                                 "search_space": {"variant": {"grid": ["a", "b"]}}}))
        tools.sweep("burn.yaml")
        tools.submit("model")
