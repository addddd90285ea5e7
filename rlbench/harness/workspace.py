"""The folder an agent works in: what it may see, and nothing it may not.

A workspace holds the task description with budget, rules and how to submit; the base model; the
train and dev splits as JSONL; the task's starter files; `task.json`, the public part of the task
spec (reward, metric, evaluation protocol, budget: no data seed, no generator, no hidden split);
and `grade`, the grading client. Test and heldout splits, grader state and other cells live outside
it, and the sandbox never mounts them.
"""

from __future__ import annotations

import json
import shutil
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.io import write_jsonl
from rlbench.sandbox.ownership import give_tree_to_sandbox
from rlbench.tasks.public import public_task
from rlbench.tasks.spec import RUN_COMMAND, BudgetConfig, TaskConfig

GRADE_SCRIPT = """#!/usr/bin/env python
\"\"\"Grading client: `./grade submit CHECKPOINT_DIR` or `./grade status`.\"\"\"
from rlbench.grading.client import main

main()
"""


@dataclass
class Workspace:
    root: Path

    @property
    def model(self) -> Path:
        return self.root / "model"

    @property
    def description(self) -> Path:
        return self.root / "description.md"


SWEEPS = """- Sweeps: `./grade sweep design.yaml` hands the harness a design (algorithm grpo, ppo, dpo, sft,
  or custom with `entry_point: train.py`; fixed `hyperparameters`; `preprocessing` (train_limit,
  dedupe); `evaluation` (every, prompts); a `search_space` of choice, grid, uniform or loguniform
  dimensions; `sweep` settings: num_samples, scheduler asha or fifo, grace_period, max_trials). It
  runs a Ray Tune sweep in the sandbox within your budget (at most {n} sweeps), scores each finished
  trial's checkpoint on dev, and returns the trial table and the best configuration; the best
  checkpoint is under `sweeps/NNN/<trial>/checkpoint` and can be submitted as it is (it carries its
  recipe). A custom entry point is run as `python SCRIPT key=value ... out=DIR seed=N` and must write
  `DIR/steps.jsonl` lines with `step` and `dev_greedy`, and its model to `DIR/checkpoint`.
"""


REWARD_ENDPOINT = """- Rewards: the items carry no answers. `./grade reward` is the only source of rewards: send
  train ids with completions and get one reward each (`sdk.rewards(items, texts)` does it for you;
  the reference pipelines use it by themselves). At most {n} completions are scored in all, on train
  prompts only; every query is logged. `./grade status` shows how many are left.
"""


def answers_hidden(task: TaskConfig) -> bool:
    from rlbench.tasks.spec import RewardAccess

    return task.reward.access == RewardAccess.endpoint


def answer_code(task: TaskConfig) -> list[str]:
    """What an endpoint task's sandbox shows empty (SandboxConfig.hide): the task generator's
    module, which labels any prompt (words.apply, a sum, a text game's shortest walk) and would let
    an agent compute train rewards without the counted endpoint. Nothing the sandbox runs imports
    it (the SDK, the reference pipelines, rewards and tools never do). The reward modules stay:
    each only compares a completion with an answer it is given (game_win replays the game on
    rlbench.envs, which the tool loop itself needs), and `rlbench.rewards` imports them all. A
    task folder's `file.py` generator needs nothing: no sandbox mounts task folders."""
    import importlib.util

    from rlbench.data.generators import generator_module
    from rlbench.tasks.spec import DataSource

    name = generator_module(task.data.generator)
    if not answers_hidden(task) or task.data.source != DataSource.generator or not name:
        return []
    try:
        spec = importlib.util.find_spec(name)
    except ImportError:  # validated when the task loaded; nothing there to hide
        return []
    origin = Path(spec.origin) if spec is not None and spec.origin else None
    return [str(origin.resolve())] if origin is not None and origin.is_file() else []


PRETRAIN_ONLY = ("trace",)  # a generator's pretraining text (a worked solution): never shown


def visible_items(task: TaskConfig, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as the workspace shows them: without `answer` when rewards come from the endpoint,
    never with a pretraining trace."""
    drop = PRETRAIN_ONLY + (("answer",) if answers_hidden(task) else ())
    return [{k: v for k, v in it.items() if k not in drop} for it in items]


def _compute_limits(b: BudgetConfig) -> str:
    """The description's line for a CPU or GPU seconds limit ('' with none)."""
    parts = ([f"{b.cpu_seconds:g} CPU seconds"] if b.cpu_seconds > 0 else []) + \
            ([f"{b.gpu_seconds:g} GPU seconds"] if b.gpu_seconds > 0 else [])
    if not parts:
        return ""
    return (f"- Compute: at most {' and '.join(parts)} in all, metered by the harness: your commands and\n"
            "  every process they start, your sweeps' trials, and your agent process. When one is used up, the\n"
            "  running command is killed and the budget is spent, as at the end of the wall clock;\n"
            "  `./grade status` shows what you have used.\n")


def _rules_tools_line(task: TaskConfig, b: BudgetConfig) -> str:
    """The rule that names the agent's tools: those the task offers, from the tool registry (a task
    without sweeps does not list `sweep`; one that asks for claims lists `claim`)."""
    from rlbench.harness.tool_registry import names, offered, task_features
    from rlbench.harness.tools import TOOL_SPECS

    listed = ", ".join(names(offered(TOOL_SPECS, task_features(task, b))))
    return textwrap.fill(f"- No network. Only this workspace is writable. Work through your tools ({listed}).",
                         width=100, subsequent_indent="  ", break_long_words=False, break_on_hyphens=False)


def _description(task: TaskConfig, task_folder: Path, sizes: dict[str, int], budget: BudgetConfig | None = None) -> str:
    body = (task_folder / "description.md").read_text().strip()
    b = budget or task.budget
    hidden = answers_hidden(task)
    fields = "`prompt` and `id` (and the task's own fields; no `answer`)" if hidden else "`prompt` and `answer`"
    rewards = REWARD_ENDPOINT.format(n=b.reward_queries) if hidden else ""
    claims = ("- Claims: `./grade claim INDEX GAIN LOW HIGH` states your estimate of submission INDEX's absolute "
              "test gain\n  over the base model with its 95% interval (fractions: 0.12 is +12 points); it is "
              "scored against the\n  harness's measurement.\n" if task.claims.required else "")
    sweeps = SWEEPS.format(n=b.max_sweeps) if b.max_sweeps else ""
    debug = (f"- `pipeline/`: a GRPO pipeline (`{RUN_COMMAND}`, every field of its\n"
             "  `GRPOConfig` settable as `key=value`). Write what you found in `DIAGNOSIS.md`.\n"
             if task.debug.pipeline else "")
    tool = (f"- Tool: the model may call the `{task.tools.name}` while it generates, by writing `[EXPR]` (e.g.\n"
            "  `[347*86]`); when it writes `]`, the environment writes the value after it and the model goes on.\n"
            f"  At most {task.tools.max_calls} calls per completion; the answer is what follows the last call. The\n"
            "  harness evaluates with this loop; `rlbench.engines.hf_generate.generate(model, tokenizer, prompts,\n"
            f"  SamplingParams(n=..., tool=\"{task.tools.name}\", max_calls={task.tools.max_calls}))` (with\n"
            "  `from rlbench.engines.sampling import SamplingParams`) runs it for you and marks the environment's\n"
            "  tokens (`Completion.tool_mask`, 0 there) so that a trainer can leave them out of its loss; the\n"
            "  reference `grpo` pipeline does.\n"
            if task.tools.name else "")
    baseline = ("- `baseline_config.yaml`: the given configuration of the "
                f"`{task.baseline_config.pipeline}` reference pipeline that you are asked to improve on.\n"
                if task.baseline_config.pipeline else "")
    return f"""{body}

## Your workspace

- `model/`: the base model (a Hugging Face folder: `AutoModelForCausalLM.from_pretrained("model")`).
- `data/train.jsonl` ({sizes['train']} items) and `data/dev.jsonl` ({sizes['dev']} items): one JSON
  object per line with {fields}. Test and heldout splits exist but you never see them.
- `task.json`: the public task spec (reward `{task.reward.name}`, metric `{task.metric.value}`, the
  evaluation protocol: {task.eval.samples_per_prompt} samples per prompt at temperature {task.eval.temperature},
  at most {task.eval.max_new_tokens} new tokens).
- `grade`: the grading client. `./grade submit PATH` submits a checkpoint folder (one that
  `from_pretrained` loads, same tokenizer and architecture family as `model/`) and prints its dev
  score; `./grade status` prints the budget used and left and your submissions so far.
  `./grade submit PATH --recipe "python train.py seed={{seed}}"` also says how the checkpoint was
  made: after you finish, the harness reruns that command on your code from the base model with
  other seeds (`{{seed}}` is replaced) and on a larger model, to see whether your result holds.
{rewards}{claims}{sweeps}{baseline}{debug}{tool}
## Budget and rules

- Wall clock: {b.wall_seconds:g} s in all, counted from the start; {b.cpus} CPUs, {b.memory_gb} GB of memory;
  device: {b.device.value}. Commands are killed when the budget runs out.
{_compute_limits(b)}- At most {b.max_submissions} submissions. The harness scores your best submission by dev score on the
  hidden test and heldout splits after you finish; no test or heldout figure reaches you.
{_rules_tools_line(task, b)}

## What the SDK offers

- `from rlbench import sdk`: `sdk.train()`, `sdk.dev()` (lists of dicts), `sdk.rewards(items, texts)`
  (the task's reward of each completion; `sdk.reward(text, answer)` where items carry answers),
  `sdk.model_path()`, `sdk.submit(path, recipe=...)`, `sdk.claim(index, gain, (low, high))`,
  `sdk.sweep(design)`, `sdk.status()`.
- Reference pipelines run on this workspace:
  `rlbench pipeline run grpo task=. out=runs/grpo steps=200` (also `ppo`, `dpo`, `sft`; every field
  of the pipeline's config can be set as `key=value`), or from Python with
  `reference_pipelines.registry.load_pipeline_config` and `run_pipeline`. Each writes `steps.jsonl`
  (reward, KL, loss, tokens/s per step), `summary.json` and a final checkpoint under `OUT/checkpoint`.
"""


def build_workspace(root: Path, task: TaskConfig, task_folder: Path, base_model: Path,
                    train: list[dict[str, Any]], dev: list[dict[str, Any]], bug: str = "",
                    budget: BudgetConfig | None = None) -> Workspace:
    """Create a fresh workspace at `root` (which must not exist yet); `bug`: the planted bug of a
    debug task's pipeline; `budget`: the cell's budget when its settings override the task's (the
    description states what the agent really has)."""
    root = Path(root)
    if root.exists():
        raise FileExistsError(f"workspace {root} already exists: every cell gets a fresh one")
    root.mkdir(parents=True)
    (root / "data").mkdir()
    write_jsonl(root / "data" / "train.jsonl", visible_items(task, train))
    write_jsonl(root / "data" / "dev.jsonl", visible_items(task, dev))
    from rlbench.models.zoo import META_FILE  # a zoo build's record names its corpus generator, params and seed

    shutil.copytree(base_model, root / "model", symlinks=False, ignore=shutil.ignore_patterns("*.lock", META_FILE))
    starter = task_folder / "starter"
    if starter.is_dir():
        shutil.copytree(starter, root, dirs_exist_ok=True)
    if task.debug.pipeline:
        from rlbench.tasks.planted_bugs import plant

        if not bug:
            raise ValueError(f"task {task.name} is a debug task: build_workspace needs the planted bug")
        plant(root, bug, task.debug.pipeline)
    (root / "task.json").write_text(json.dumps(public_task(task), indent=2))
    if task.baseline_config.pipeline:
        import yaml

        (root / "baseline_config.yaml").write_text(yaml.safe_dump(
            {"pipeline": task.baseline_config.pipeline, "settings": dict(task.baseline_config.settings)}, sort_keys=False))
    sizes = {"train": len(train), "dev": len(dev)}
    (root / "description.md").write_text(_description(task, task_folder, sizes, budget))
    grade = root / "grade"
    grade.write_text(GRADE_SCRIPT)
    grade.chmod(0o755)
    give_tree_to_sandbox(root)
    return Workspace(root)
