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

from rlbench.features import active
from rlbench.features.reward_endpoint import answers_hidden
from rlbench.io import write_jsonl
from rlbench.sandbox.ownership import give_tree_to_sandbox
from rlbench.tasks.public import public_task
from rlbench.tasks.spec import BudgetConfig, TaskConfig

GRADE_SCRIPT = """#!/usr/bin/env python
\"\"\"Grading client: `./grade submit CHECKPOINT_DIR`, `./grade reward FILE.jsonl`, `./grade status`, ...\"\"\"
from rlbench.sdk import grade_main

grade_main()
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


PRETRAIN_ONLY = ("trace",)  # a generator's pretraining text (a worked solution): never shown


def visible_items(task: TaskConfig, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Items as the workspace shows them: without `answer` (and the worked `solution` it came from)
    when rewards come from the endpoint, never with a pretraining trace."""
    drop = PRETRAIN_ONLY + (("answer", "solution") if answers_hidden(task) else ())
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
    fields = ("`prompt` and `id` (and the task's own fields; no `answer`)" if answers_hidden(task)
              else "`prompt` and `answer`")
    if task.prompt.active:  # rendered once when the splits were built (rlbench/data/prompts.py)
        how = " and ".join(x for x in ("the base model's chat template" if task.prompt.chat else "",
                                       "the task's template" if task.prompt.template else "",
                                       f"{task.prompt.few_shot} worked examples" if task.prompt.few_shot else "") if x)
        fields += (f"; `prompt` is already rendered ({how}): give it to the model as it is, since the harness scores "
                   "test with prompts rendered the same way, and `question` is the text it was made from")
    features = "".join(f.describe(task, b) for f in active(task))  # each task feature's own paragraph
    return f"""{body}

## Your workspace

- `model/`: the base model (a Hugging Face folder: `AutoModelForCausalLM.from_pretrained("model")`).
- `data/train.jsonl` ({sizes['train']} items) and `data/dev.jsonl` ({sizes['dev']} items): one JSON
  object per line with {fields}. Test and heldout splits exist but you never see them.
- `task.json`: the public task spec (reward `{task.reward.name}`, metric `{task.metric.value}`, the
  evaluation protocol: {task.eval.samples_per_prompt} samples per prompt at temperature {task.eval.temperature},
  at most {task.eval.max_new_tokens} new tokens).
- `grade`: the grading client. `./grade submit PATH` submits a checkpoint folder (one that
  `from_pretrained` loads, same tokenizer and architecture family as `model/`, or a PEFT LoRA
  adapter folder, which the harness merges onto `model/`) and prints its dev score; `./grade status` prints the budget used and left and your submissions so far.
  `./grade submit PATH --recipe "python train.py seed={{seed}}"` also says how the checkpoint was
  made: after you finish, the harness reruns that command on your code from the base model with
  other seeds (`{{seed}}` is replaced) and on a larger model, to see whether your result holds.
{features}
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
                    train: list[dict[str, Any]], dev: list[dict[str, Any]],
                    states: dict[str, dict[str, Any]] | None = None, budget: BudgetConfig | None = None) -> Workspace:
    """Create a fresh workspace at `root` (which must not exist yet). `states`: each task feature's
    prepared state by its name (a debug task's planted bug; rlbench/features/); `budget`: the
    cell's budget when its settings override the task's (the description states what the agent
    really has)."""
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
    (root / "task.json").write_text(json.dumps(public_task(task), indent=2))
    for feature in active(task):  # what each task feature adds: a planted pipeline, a baseline configuration
        feature.build(task, root, (states or {}).get(feature.name, {}))
    sizes = {"train": len(train), "dev": len(dev)}
    (root / "description.md").write_text(_description(task, task_folder, sizes, budget))
    grade = root / "grade"
    grade.write_text(GRADE_SCRIPT)
    grade.chmod(0o755)
    give_tree_to_sandbox(root)
    return Workspace(root)
