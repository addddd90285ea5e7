"""The ceiling: a scripted RL engineer that uses only the tools an LLM agent has.

It reads the task, submits the base model (its dev score is the bar; the cell is graded even if
nothing trains), writes a training script into the workspace (reference_pipelines' GRPO on the
workspace through the SDK), runs it in the sandbox inside what is left of the budget, reads the
run's summary, and submits the checkpoint with its recipe (the command, `{seed}` where the seed
goes). When a run fails, is cut off, does not raise the reward, or scores below the base on dev,
it retries with the next, more conservative setting.

On an optimize task (the workspace holds `baseline_config.yaml`) it hands the harness a design
instead: the given settings with a search space over learning rate, group size and KL weight,
swept by Ray Tune under ASHA, and submits the best trial's checkpoint.

What the task's public spec says changes the plan, never the tools: preference pairs in the train
items mean DPO on those pairs; a KL limit means attempts with a stronger KL weight, each measured
on dev prompts (rlbench/evaluation/kl.py, in the sandbox) before it is submitted; a required claim
means claiming the dev difference to the base's submission, with the two dev
intervals combined, as the test gain.

On a debug task (the workspace holds `pipeline/`) it probes the given pipeline: the loss functions
on inputs whose right answer is known, the training loop's source for what such a check cannot
see. In each file where a probe finds something broken it restores, through read and write, the
lines that differ from reference GRPO as it knows it (an engineer's knowledge: the sandbox hides
the harness's copy from every agent's commands), writes the findings to DIAGNOSIS.md, and trains
with the fixed pipeline.
"""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING, Any

import yaml

from rlbench.agents.base import Agent
from rlbench.rewards import answer_is_completion

if TYPE_CHECKING:
    from rlbench.harness.tools import ToolBox

# the pipelines that sample completions and so ask a reward endpoint for their rewards
SAMPLING_ALGOS = ("grpo", "ppo")

TRAIN_PY = '''"""GRPO on this workspace (written by the reference agent).

    python train.py [sft_steps=N] [any GRPO setting=value ...]

sft_steps: first N steps of SFT on the train answers, then GRPO from that checkpoint; with
max_seconds, the SFT's time comes out of the same box."""
import json
import math
import sys
import time
from pathlib import Path

from safetensors import safe_open

from rlbench import sdk
from reference_pipelines.registry import load_pipeline_config, run_pipeline


def parameters(folder):
    n = 0
    for path in sorted(Path(folder).glob("*.safetensors")):
        with safe_open(str(path), "pt") as f:
            n += sum(math.prod(f.get_slice(k).get_shape()) for k in f.keys())
    return n


opts = dict(a.split("=", 1) for a in sys.argv[1:])
sft_steps = int(opts.pop("sft_steps", 0))
n = parameters(sdk.model_path())
# one rule for every size: learning rates set at the S model's 0.67M parameters, scaled as
# 1/sqrt(parameters) (M, 5.1M: x0.36; a 0.5B model: x0.037), so the recipe carries to the scale model
scale = math.sqrt(669_312 / n) if n else 1.0
opts.setdefault("lr", f"{3e-4 * scale:.3g}")
print(f"train {len(sdk.train())} items, dev {len(sdk.dev())}, reward {sdk.task().reward.name}, {n:,} parameters, "
      f"sft_steps {sft_steps}, settings {opts}", flush=True)
root = "task=" + str(sdk.root())
if sft_steps:
    t0 = time.monotonic()
    out = opts.get("out", "runs/train")
    box = float(opts.get("max_seconds", 0))
    # SFT gets at most 30% of the box (a larger model may not finish its steps in it)
    sft = load_pipeline_config("sft", [root, f"steps={sft_steps}", f"lr={5e-4 * scale:.3g}", "eval_every=0",
                                       f"seed={opts.get('seed', 0)}", f"out={out}/sft",
                                       f"max_seconds={max(1, int(0.3 * box)) if box else 0}"])
    opts["model"] = run_pipeline("sft", sft)["checkpoint"]
    if box:
        opts["max_seconds"] = str(max(10, int(box - (time.monotonic() - t0))))
cfg = load_pipeline_config("{algo}", [root, *(f"{k}={v}" for k, v in opts.items())])
summary = run_pipeline("{algo}", cfg)
print(json.dumps({{k: summary[k] for k in ("steps", "seconds", "checkpoint", "dev_greedy")}}))
'''

# `train_seconds`: the run's own time box (its max_seconds, within what the budget leaves); steps
# is then only a ceiling. With rewards from the endpoint, steps are also capped by the queries left.
# `sft_steps` (train.py's own): where train items carry answers, SFT on them first, then GRPO from
# there, in the same box (docs/benchmarks.md, "Reference RL effectiveness"). `save_every`: the
# harness refuses a checkpoint whose weights drifted too far from the base (lineage), and long runs
# come near that limit; the agent then submits the latest saved step that passes.
ATTEMPTS: list[dict[str, Any]] = [
    {"sft_steps": 300, "steps": 5000, "train_seconds": 300, "save_every": 400},
    {"steps": 300, "lr": 1.5e-4, "batch_prompts": 8},
    {"steps": 150, "lr": 1e-4, "batch_prompts": 8, "group_size": 4},
]


# under a KL limit: the KL weight is what holds the policy near the base
KL_ATTEMPTS: list[dict[str, Any]] = [
    {"steps": 400, "kl_coef": 0.05},
    {"steps": 300, "kl_coef": 0.2},
    {"steps": 200, "kl_coef": 0.5, "lr": 1.5e-4},
]

# held near the base (beta 0.5, lr 1e-4): on pref-ppo's near-miss pairs DPO at its defaults (beta
# 0.1, lr 3e-4, 300 steps) took dev gold reward from 0.553 to ~0.42; these settings reached 0.592
DPO_ATTEMPTS: list[dict[str, Any]] = [
    {"steps": 150, "pairs": "data/train.jsonl", "beta": 0.5, "lr": 1e-4, "eval_every": 0},
    {"steps": 100, "pairs": "data/train.jsonl", "beta": 1.0, "lr": 1e-4, "eval_every": 0},
]

KL_PY = '''"""KL of a checkpoint to the base model on dev prompts (written by the reference agent)."""
import json
import sys

from rlbench import sdk
from rlbench.evaluation.kl import kl_to_base

print(json.dumps(kl_to_base(sys.argv[1], sdk.model_path(), sdk.task(), sdk.dev()[:300])))
'''

PROBE_PY = r'''"""Checks of the given GRPO pipeline, each against what GRPO must do (written by the reference
agent): the loss functions on inputs whose right answer is known, the training loop's source for
what a loss check cannot see. Prints one JSON list of [file, finding]."""
import json
import re
from pathlib import Path

import torch

from pipeline import loss, train

found = []
adv = loss.group_advantages(torch.tensor([1.0, 0.0, 0.0, 0.0, 1.0, 1.0, 0.0, 0.0]), 4)
if adv[0] <= 0:
    found.append(["loss.py", "The advantage has the wrong sign: the best completion in its group gets a negative "
                             "advantage, so training pushes it down."])
adv = loss.group_advantages(torch.tensor([1.0, 0.0, 1.0, 1.0]), 2)
if adv[2:].abs().max() > 1e-4:
    found.append(["loss.py", "Advantages are not computed within each prompt's group: completions are compared with "
                             "those of other prompts."])
zeros = torch.zeros(1, 3)
kl_loss, _ = loss.grpo_loss(zeros, zeros, torch.full((1, 3), -1.0), torch.zeros(1), torch.ones(1, 3), 0.2, 1.0)
if kl_loss < 0:
    found.append(["loss.py", "The KL penalty has the wrong sign: it is subtracted from the loss, so the policy is "
                             "pushed away from the reference model."])
src = Path("pipeline/train.py").read_text()
if re.search(r"grpo_loss\(\s*logp\s*,\s*logp\s+if", src):
    found.append(["train.py", "The old log-probs passed to grpo_loss are not detached: the ratio exp(logp - logp) "
                              "is 1 with zero gradient, so the policy gradient vanishes and nothing is learned."])
lr = train.GRPOConfig().lr
if not 1e-6 <= lr <= 1e-2:
    found.append(["train.py", f"The default learning rate is {lr:g}, orders of magnitude too small or too large "
                              "for this model, so training cannot work."])
if not re.search(r"batch_rewards\([^\n]*c\.text", src):
    found.append(["train.py", "Rewards are computed on the prompt field instead of the completion texts, so every "
                              "completion of a prompt gets the same reward."])
print(json.dumps(found))
'''

def restore(have: str, good: str) -> tuple[str, list[str]]:
    """`have` with the lines it replaced from `good` put back; lines `have` only adds or drops stay
    as they are (the workspace's own __main__ block). Also returns each change as `old  ->  new`."""
    a, b = have.splitlines(keepends=True), good.splitlines(keepends=True)
    out: list[str] = []
    changes: list[str] = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(a=a, b=b, autojunk=False).get_opcodes():
        out += b[j1:j2] if op == "replace" else a[i1:i2]
        if op == "replace":
            changes.append(f"{''.join(a[i1:i2]).strip()}  ->  {''.join(b[j1:j2]).strip()}")
    return "".join(out), changes


# what the reference agent searches on an optimize task (GRPO settings known to matter on arith)
SEARCH_SPACE: dict[str, Any] = {
    "lr": {"loguniform": [1.0e-4, 1.0e-3]},
    "group_size": {"choice": [4, 8]},
    "kl_coef": {"choice": [0.0, 0.01]},
}


class ReferenceAgent(Agent):
    name = "reference"

    def run(self, description: str, tools: ToolBox) -> None:
        task = json.loads(tools.read("task.json").get("content") or "{}")
        if (task.get("baseline_config") or {}).get("pipeline"):
            self.sweep(tools)
        elif (task.get("debug") or {}).get("pipeline"):
            self.debug(tools, task)
        else:
            self.train(tools, task)

    def debug(self, tools: Any, task: dict[str, Any]) -> None:
        """Probe the given pipeline, restore what the probes find broken from reference GRPO, write
        the findings to DIAGNOSIS.md, then train with the fixed pipeline."""
        tools.write("probe.py", PROBE_PY)
        run = tools.exec("python probe.py", timeout=max(1.0, min(300.0, tools.remaining() - 60)))
        try:
            found = json.loads(run["stdout"].strip().splitlines()[-1])
        except (KeyError, IndexError, ValueError):
            found = []
        lines = ["# Diagnosis", ""]
        if found:
            from rlbench.tasks.planted_bugs import reference_sources  # GRPO as this agent knows it

            known = reference_sources(task["debug"]["pipeline"])
            changes = []
            for name in sorted({f for f, _ in found}):
                have = tools.read(f"pipeline/{name}").get("content")
                if have is None:
                    continue
                fixed, changed = restore(have, known[name])
                tools.write(f"pipeline/{name}", fixed)
                changes += [f"pipeline/{name}: {c}" for c in changed]
            lines += [f"- `pipeline/{f}`: {text}" for f, text in found]
            lines += ["", "Fixed by restoring these lines from reference GRPO:", "", "```", *changes, "```"]
        else:
            lines.append("The probes found nothing wrong; the pipeline was trained as given.")
        tools.write("DIAGNOSIS.md", "\n".join(lines) + "\n")
        self.train(tools, task, command="python -m pipeline.train task=.")

    def sweep(self, tools: Any) -> None:
        given = yaml.safe_load(tools.read("baseline_config.yaml")["content"])
        space = self.options.get("search_space", SEARCH_SPACE)
        fixed = {k: v for k, v in given["settings"].items() if k not in space and k not in ("eval_every", "eval_prompts")}
        design = {"algorithm": given["pipeline"], "hyperparameters": fixed, "search_space": space,
                  "evaluation": {"every": int(self.options.get("report_every", 50)), "prompts": 200},
                  "sweep": {"num_samples": int(self.options.get("num_samples", 6)), "scheduler": "asha",
                            "grace_period": 2, "reduction_factor": 2, "trial_cpus": 1, "max_trials": 16}}
        tools.write("design.yaml", yaml.safe_dump(design, sort_keys=False))
        result = tools.sweep("design.yaml")
        best = result.get("best") if result.get("ok") else None
        if best and tools.submit(best["checkpoint"]).get("ok"):
            return
        # no sweep result: train the given configuration and submit that
        args = " ".join(f"{k}={v}" for k, v in given["settings"].items())
        out = "runs/baseline"
        run = tools.exec(f"rlbench pipeline run {given['pipeline']} --quiet task=. out={out} {args} seed={self.options.get('seed', 0)}",
                         timeout=max(1.0, tools.remaining() - 30))
        if run["ok"] and tools.submit(f"{out}/checkpoint", recipe=f"rlbench pipeline run {given['pipeline']} --quiet "
                                                                  f"task=. out={out} {args} seed={{seed}}").get("ok"):
            return
        tools.submit("model")

    def train(self, tools: Any, task: dict[str, Any], command: str = "python train.py") -> None:
        """Run the attempts with `command` (the written train.py, or a pipeline the task gives)."""
        first = json.loads((tools.read("data/train.jsonl", max_bytes=4096).get("content") or "{}").split("\n", 1)[0] or "{}")
        pairs = "chosen" in first and "rejected" in first
        max_kl = float((task.get("constraints") or {}).get("max_kl") or 0.0)
        claims = bool((task.get("claims") or {}).get("required"))
        algo = self.options.get("algo", "dpo" if pairs else "grpo")
        attempts = self.options.get("attempts", DPO_ATTEMPTS if pairs else KL_ATTEMPTS if max_kl else ATTEMPTS)
        reserve = float(self.options.get("reserve_s", 60))  # time kept for submitting
        # the base model first: its dev score is the bar a trained checkpoint must clear (the harness
        # scores the best dev submission, so a run that made the model worse leaves the base chosen
        # and the next attempt runs), and the difference a required claim states. `base_first=false`
        # (tests whose few-step runs must be the chosen submission) submits it only for a claim.
        base_first = str(self.options.get("base_first", True)).lower() not in ("false", "0", "no")
        base_dev = tools.submit("model") if base_first or claims else {}
        if max_kl:
            tools.write("kl.py", KL_PY)
        if command == "python train.py":
            tools.write("train.py", TRAIN_PY.replace("{algo}", algo).replace("{{", "{").replace("}}", "}"))
        for i, settings in enumerate(attempts, 1):
            left = tools.remaining()
            if left <= reserve:
                break
            out = f"runs/attempt{i}"
            settings = dict(settings)
            if command != "python train.py" or algo != "grpo" or "answer" not in first \
                    or not answer_is_completion(str((task.get("reward") or {}).get("name", ""))):
                settings.pop("sft_steps", None)  # only the written train.py warms up, and only on answers that are completions
            # the run stops itself in time to save its checkpoint: start-up and the save fit the margin
            box_s = max(30.0, left - reserve - 45)
            if "train_seconds" in settings:
                box_s = min(box_s, float(settings.pop("train_seconds")))
            box = {"max_seconds": int(box_s)} if "max_seconds" not in settings else {}
            if (task.get("reward") or {}).get("access") == "endpoint" and algo in SAMPLING_ALGOS:
                # only a sampling algorithm asks the endpoint for rewards; DPO learns from the pairs,
                # SFT from the answers (a cap from pref-ppo's 0 queries cut its DPO runs to 1 step,
                # found in revalidation)
                settings.update(self._query_cap(tools, settings))
            args = " ".join(f"{k}={v}" for k, v in {**settings, **box, "out": out}.items())
            run = tools.exec(f"{command} {args} seed={self.options.get('seed', 0)}", timeout=left - reserve)
            if not run["ok"]:
                continue  # the stderr tail is in the trajectory; the next setting is more conservative
            summary = tools.read(f"{out}/summary.json")
            if not summary.get("ok"):
                continue
            info = json.loads(summary["content"])
            # learned: the last 50 steps' mean reward above the first 50's (one step's mean is too
            # noisy to compare against; a flat run, all zeros on a base that never succeeds, did
            # not learn either, and the next attempt changes course). A run of under 100 steps is
            # too short to tell and is taken as it is. After an SFT warm-up GRPO starts where SFT
            # left it, often at the reward's ceiling, so a flat reward says nothing of what the run
            # learned from the base: the harness's dev score judges it (honest-arith's seed 2 had a
            # run flat at 0.98 reward skipped, dev 0.99 against the base's 0.78; revalidation).
            warmed_up = int(settings.get("sft_steps", 0)) > 0
            if not warmed_up and int(info.get("steps", 0)) >= 100 and info.get("last_reward_mean_50", 1.0) <= info.get(
                    "first_reward_mean_50", info.get("first_reward", 0.0)):
                continue
            if max_kl and not self._within_kl(tools, f"{out}/checkpoint", max_kl, reserve):
                continue  # the next attempt holds the policy closer to the base
            sub = tools.submit(f"{out}/checkpoint", recipe=f"{command} {self._recipe(settings, box, info, out)} seed={{seed}}")
            every = int(settings.get("save_every", 0))
            if not sub.get("ok") and "lineage" in str(sub.get("reason", "")) and every:
                # too far from the base: the latest saved step that the harness takes (each one the
                # same run stopped earlier, so its recipe names that step)
                for step in list(range(int(info["steps"]) // every * every, 0, -every))[:3]:
                    at = {"stopped_by": "max_seconds", "steps": step}
                    sub = tools.submit(f"{out}/checkpoint-{step}",
                                       recipe=f"{command} {self._recipe(settings, box, at, out)} seed={{seed}}")
                    if sub.get("ok") or "lineage" not in str(sub.get("reason", "")):
                        break
            if sub.get("ok"):
                against_base = base_dev.get("ok") and sub.get("dev") is not None
                if against_base and sub["dev"] < base_dev["dev"] and i < len(attempts):
                    continue  # worse than the base on dev: the next, more conservative attempt
                if claims and against_base:
                    self._claim(tools, base_dev, sub)
                return
        if not base_dev:
            tools.submit("model")  # nothing trained: the base, so the cell is still graded

    @staticmethod
    def _recipe(settings: dict[str, Any], box: dict[str, Any], info: dict[str, Any], out: str) -> str:
        """The settings as a rerun should take them: a run stopped by its time box did as many
        steps as this machine managed, so the recipe names those steps and keeps a looser box (twice
        the run's) only as a guard: a rerun as fast as this one does the same steps and reproduces
        the checkpoint, and one on a larger model stops by time."""
        if info.get("stopped_by") == "max_seconds" and box:
            settings = {**settings, "steps": int(info["steps"])}
            box = {"max_seconds": 2 * int(box["max_seconds"])}
        return " ".join(f"{k}={v}" for k, v in {**settings, **box, "out": out}.items())

    @staticmethod
    def _query_cap(tools: Any, settings: dict[str, Any]) -> dict[str, Any]:
        """With rewards from the endpoint, no more steps than 90% of the queries left pay for
        (each step asks for batch_prompts x group_size rewards): a run that exhausts them fails."""
        left = tools.status().get("reward_queries_left")
        if left is None:
            return {}
        per_step = int(settings.get("batch_prompts", 16)) * int(settings.get("group_size", 8))
        return {"steps": max(1, min(int(settings.get("steps", 500)), int(0.9 * left) // per_step))}

    @staticmethod
    def _within_kl(tools: Any, checkpoint: str, max_kl: float, reserve: float) -> bool:
        run = tools.exec(f"python kl.py {checkpoint}", timeout=max(1.0, tools.remaining() - reserve / 2))
        try:
            kl = json.loads(run["stdout"].strip().splitlines()[-1])
        except (KeyError, IndexError, ValueError):
            return False
        return kl["ci_high"] <= max_kl  # the upper end: dev and test prompts differ

    @staticmethod
    def _claim(tools: Any, base: dict[str, Any], sub: dict[str, Any]) -> None:
        """Dev difference as the test gain; the two dev intervals combined (as if independent:
        wider than the paired interval the harness measures, so on the safe side)."""
        gain = sub["dev"] - base["dev"]
        half = (((base["dev_ci"][1] - base["dev_ci"][0]) / 2) ** 2 + ((sub["dev_ci"][1] - sub["dev_ci"][0]) / 2) ** 2) ** 0.5
        tools.claim(sub["index"], gain, (max(-1.0, gain - half), min(1.0, gain + half)))
