"""The schema of `tasks/<name>/task.yaml`.

A task is data plus a verifier plus a fixed evaluation protocol plus a budget. Everything that can
change a score is a field here, so that a score can be reproduced from the file alone.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from rlbench.config.core import ConfigError, check

SPLITS = ("train", "dev", "test", "heldout")
VISIBLE_SPLITS = ("train", "dev")
HIDDEN_SPLITS = ("test", "heldout")
WAVE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")  # a test wave's name (rlbench/data/waves.py)


def check_wave_name(name: str) -> None:
    if not WAVE_NAME.match(name):
        raise ConfigError(f"key 'wave': value '{name}' is not a wave name (letters, digits, '_' and '-', at most 64)")


class Category(str, enum.Enum):
    reasoning = "reasoning"
    alignment = "alignment"
    specialization = "specialization"


class Difficulty(str, enum.Enum):
    easy = "easy"
    medium = "medium"
    hard = "hard"
    expert = "expert"


class WorkKind(str, enum.Enum):
    design = "design"
    implement = "implement"
    debug = "debug"
    optimize = "optimize"
    evaluate = "evaluate"


class Device(str, enum.Enum):
    cpu = "cpu"
    cuda = "cuda"
    auto = "auto"


class Metric(str, enum.Enum):
    pass_at_1 = "pass_at_1"  # binary rewards: the mean of correct samples per prompt
    mean_reward = "mean_reward"  # graded rewards in [0, 1]: the same mean, of a score rather than a hit


class RewardAccess(str, enum.Enum):
    local = "local"  # train and dev carry answers; the agent computes rewards itself
    endpoint = "endpoint"  # no answers reach the agent: rewards only from the grading API, counted


class DataSource(str, enum.Enum):
    generator = "generator"
    hf = "hf"
    workspace = "workspace"  # inside an agent's workspace: train/dev as JSONL, nothing hidden


@dataclass
class SplitSizes:
    train: int = 5000
    dev: int = 500
    test: int = 1200
    heldout: int = 1200

    def validate(self) -> None:
        for name in ("train", "dev", "test", "heldout"):
            value = getattr(self, name)
            check(value > 0, f"data.sizes.{name}", value, "a positive integer")


@dataclass
class HFSplitSource:
    """One split's own source, where it differs from the task's (`data.hf.sources.heldout`: a
    shifted dataset for heldout, e.g. SVAMP beside GSM8K). A field left unset is the task's."""

    path: Optional[str] = None
    name: Optional[str] = None
    revision: Optional[str] = None
    split: Optional[str] = None  # the dataset's split expression, slices included ("train[:7000]")
    data_files: Optional[dict[str, str]] = None
    prompt_field: Optional[str] = None
    prompt_template: Optional[str] = None
    answer_field: Optional[str] = None
    answer_template: Optional[str] = None
    answer_fields: Optional[list[str]] = None
    answer_extract: Optional[str] = None


@dataclass
class HFDataConfig:
    """A HF `datasets` source: `load_dataset(path, name, revision=..., data_files=..., split=...)`
    per split. `splits` maps each of the task's splits to the dataset's split expression (slices
    allowed, so dev can be the tail of train); `sources` gives a split a dataset of its own.
    `revision` pins a hub dataset to a commit, so the task is the same data everywhere; the
    loaded splits are stored under RLBENCH_HOME with their fingerprints, and no sandbox fetches."""

    path: str = MISSING
    name: Optional[str] = None
    revision: Optional[str] = None
    data_files: dict[str, str] = field(default_factory=dict)
    splits: dict[str, str] = field(default_factory=dict)
    prompt_field: str = "prompt"
    # a row's fields formatted into the question ("{Body} {Question}"); '' : the prompt_field as is
    prompt_template: str = ""
    answer_field: str = "answer"
    # a row's fields formatted into the answer (a code task's tests: "{test_setup_code}\n{test_list}",
    # a list field one line an entry); '' : the answer_field
    answer_template: str = ""
    # the answer as a JSON object of these row fields, each as the row holds it (an instruction
    # task's `instruction_id_list`, `kwargs` and `prompt`); []: the answer_field or answer_template
    answer_fields: list[str] = field(default_factory=list)
    # the answer as stored: the answer field's final answer by a named extractor (rlbench/rewards/extract.py;
    # `gsm8k` takes what follows `####`), the whole field kept as `solution`; '' : the field as it is
    answer_extract: str = ""
    sources: dict[str, HFSplitSource] = field(default_factory=dict)

    def validate(self) -> None:
        from rlbench.rewards.extract import check_extractor

        for split in list(self.splits) + list(self.sources):
            check(split in SPLITS, f"data.hf.splits/sources.{split}", split, ", ".join(SPLITS))
        for split in SPLITS:
            src = self.source(split)
            if src.answer_extract:
                check_extractor(src.answer_extract, f"data.hf.answer_extract ({split})")
            if src.answer_fields and (src.answer_template or src.answer_extract):
                raise ConfigError(f"key 'data.hf.answer_fields' ({split}): an answer is its fields as JSON, or "
                                  f"answer_template/answer_extract's text, not both")

    def source(self, split: str) -> "HFSplitSource":
        """The split's source, every field resolved (its own where set, else the task's)."""
        own = self.sources.get(split) or HFSplitSource()
        pick = lambda name, default: getattr(own, name) if getattr(own, name) is not None else default  # noqa: E731
        return HFSplitSource(path=pick("path", self.path), name=pick("name", self.name),
                             revision=pick("revision", self.revision),
                             split=pick("split", self.splits.get(split, split)),
                             data_files=pick("data_files", dict(self.data_files)),
                             prompt_field=pick("prompt_field", self.prompt_field),
                             prompt_template=pick("prompt_template", self.prompt_template),
                             answer_field=pick("answer_field", self.answer_field),
                             answer_template=pick("answer_template", self.answer_template),
                             answer_fields=list(pick("answer_fields", self.answer_fields)),
                             answer_extract=pick("answer_extract", self.answer_extract))


@dataclass
class DataConfig:
    source: DataSource = DataSource.generator
    # builtin generator name (e.g. `arith`), `package.module:function`, or `file.py:function`
    # relative to the task folder
    generator: str = ""
    # public: a generator task's splits are drawn from HMAC(installation secret, seed) unless
    # RLBENCH_SPLIT_SEED=public (rlbench/data/splits.py); an hf task's splits are the dataset's own,
    # public whatever the setting
    seed: int = 0
    sizes: SplitSizes = field(default_factory=SplitSizes)
    params: dict[str, Any] = field(default_factory=dict)
    hf: Optional[HFDataConfig] = None
    workspace: str = ""  # source=workspace: the folder holding data/train.jsonl and data/dev.jsonl
    # a fresh test wave: test and heldout redrawn from this wave's secret seed (rlbench/data/waves.py);
    # set per run (`rlbench run wave=NAME`), never in a task file
    wave: str = ""

    def validate(self) -> None:
        if self.wave:
            check_wave_name(self.wave)
        if self.source == DataSource.generator:
            check(bool(self.generator), "data.generator", self.generator,
                  "a generator name, module:function or file.py:function")
        elif self.source == DataSource.workspace:
            check(bool(self.workspace), "data.workspace", self.workspace, "the workspace folder")
        else:
            check(self.hf is not None, "data.hf", None, "a HF datasets spec when data.source=hf")

    def origin(self) -> str:
        """Where the items come from, in a line (`rlbench tasks list`): the hub dataset of each split
        that has its own, or the generator."""
        if self.source == DataSource.generator:
            return f"generator {self.generator}"
        if self.source == DataSource.workspace:
            return f"workspace {self.workspace}"
        assert self.hf is not None
        named = lambda src: src.path + (f" ({src.name})" if src.name and src.name != "default" else "")  # noqa: E731
        main = named(self.hf.source("train"))
        others = [f"{split} {named(self.hf.source(split))}" for split in SPLITS if named(self.hf.source(split)) != main]
        return "; ".join([main] + others)


@dataclass
class RewardConfig:
    name: str = "exact_int"
    params: dict[str, Any] = field(default_factory=dict)
    # endpoint: the workspace's train and dev lack `answer`, and rewards on train prompts come only
    # from the grading server's reward operation (`./grade reward`, `sdk.rewards`; at most budget.reward_queries completions, every query logged). SFT on
    # labels cannot saturate such a task.
    access: RewardAccess = RewardAccess.local

    def validate(self) -> None:
        from rlbench.rewards import check_reward

        check_reward(self.name, self.params)


@dataclass
class EvalProtocol:
    """How the harness scores a model. Part of the cache key of every score."""

    samples_per_prompt: int = 4
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 8
    seed: int = 1234
    greedy: bool = True
    batch_size: int = 256  # fixed: sampling RNG streams follow the batch layout
    max_ci_halfwidth: float = 0.03

    def validate(self) -> None:
        check(self.samples_per_prompt >= 1, "eval.samples_per_prompt", self.samples_per_prompt, ">= 1")
        check(self.temperature > 0, "eval.temperature", self.temperature, "> 0 (greedy is eval.greedy)")
        check(0 < self.top_p <= 1, "eval.top_p", self.top_p, "in (0, 1]")
        check(self.max_new_tokens >= 1, "eval.max_new_tokens", self.max_new_tokens, ">= 1")
        check(self.batch_size >= 1, "eval.batch_size", self.batch_size, ">= 1")
        check(0 < self.max_ci_halfwidth < 1, "eval.max_ci_halfwidth", self.max_ci_halfwidth, "in (0, 1)")


@dataclass
class BudgetConfig:
    wall_seconds: int = 1800
    # compute limits beside the wall clock (0: none): the agent's own CPU seconds, its commands' and
    # its sweeps' (rlbench/sandbox/compute.py); GPU seconds of the cell's devices, where NVML meters them
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    max_submissions: int = 5
    max_sweeps: int = 2  # designs the harness sweeps with Ray Tune (0: the task offers none)
    reward_queries: int = 0  # completions the reward endpoint scores (reward.access=endpoint)
    device: Device = Device.cpu
    cpus: int = 2
    memory_gb: int = 8

    def validate(self) -> None:
        check(self.wall_seconds > 0, "budget.wall_seconds", self.wall_seconds, "> 0")
        check(self.cpu_seconds >= 0, "budget.cpu_seconds", self.cpu_seconds, ">= 0 (0: no CPU limit)")
        check(self.gpu_seconds >= 0, "budget.gpu_seconds", self.gpu_seconds, ">= 0 (0: no GPU limit)")
        check(self.max_submissions >= 1, "budget.max_submissions", self.max_submissions, ">= 1")
        check(self.max_sweeps >= 0, "budget.max_sweeps", self.max_sweeps, ">= 0")
        check(self.reward_queries >= 0, "budget.reward_queries", self.reward_queries, ">= 0")
        check(self.cpus >= 1, "budget.cpus", self.cpus, ">= 1")
        check(self.memory_gb >= 1, "budget.memory_gb", self.memory_gb, ">= 1")


@dataclass
class TaskLimits:
    """What the task's model needs of a cell's sandbox, beyond the harness's defaults (sized for the
    CPU models): a 0.5B-7B model needs more address space, workspace and checkpoint room. Each is a
    floor: a cell runs with the larger of its own setting and the task's, so no cell can make the
    task smaller than it is (rlbench/harness/environment.py sandbox_limits)."""

    memory_gb: Optional[float] = None  # address space per process
    disk_gb: Optional[float] = None  # the whole workspace
    max_file_gb: Optional[float] = None  # the largest single file (a safetensors shard)
    tmp_mb: Optional[int] = None
    checkpoint_mb: Optional[int] = None  # the largest checkpoint the grader takes

    def validate(self) -> None:
        for name in ("memory_gb", "disk_gb", "max_file_gb", "tmp_mb", "checkpoint_mb"):
            value = getattr(self, name)
            check(value is None or value > 0, f"limits.{name}", value, "> 0 (or unset: the harness's default)")


@dataclass
class PromptConfig:
    """How an item's question becomes the text a model is given. It is rendered once, when the
    splits are built (rlbench/data/prompts.py), and stored as the item's `prompt` (the question
    stays as `question`), so the harness's scoring, the SDK and the pipelines all read the one
    prompt: no reader can format it differently from the others."""

    template: str = ""  # a format string with {prompt} (the question): "Question: {prompt}\nAnswer:"; '' : as is
    system: str = ""  # with chat: the system message
    chat: bool = False  # render through the base model's chat template (tokenizer_config.json), ready for the reply
    few_shot: int = 0  # the first k train items, with their answers, as worked examples before each question

    def validate(self) -> None:
        if self.template:
            check("{prompt}" in self.template, "prompt.template", self.template, "a format string with {prompt}")
        check(not self.system or self.chat, "prompt.system", self.system, "empty unless prompt.chat is true")
        check(0 <= self.few_shot <= 16, "prompt.few_shot", self.few_shot, "0..16")

    @property
    def active(self) -> bool:
        return bool(self.template or self.chat or self.few_shot)


@dataclass
class ModelsConfig:
    base: str = MISSING  # a zoo recipe name, a local folder or a HF hub id
    scale: Optional[str] = None  # the second size of the same family, for scalability checks


@dataclass
class SuccessConfig:
    """A run succeeds when the test gain over the base model reaches this (absolute, in points/100)."""

    min_abs_gain: float = 0.05


@dataclass
class ConstraintConfig:
    """What a result must also satisfy. `max_kl`: the mean per-prompt KL(trained || base) on the
    test prompts, measured by the harness on the trained model's own samples (0: no constraint)."""

    max_kl: float = 0.0

    def validate(self) -> None:
        check(self.max_kl >= 0, "constraints.max_kl", self.max_kl, ">= 0 (0: none)")


@dataclass
class ClaimsConfig:
    """Evaluate tasks: the agent must claim its own test gain (`./grade claim`), and the claim is
    scored against the harness's measurement."""

    required: bool = False


@dataclass
class ToolsConfig:
    """A tool the model may call while it generates (rlbench/envs): the harness's evaluation and
    the reference pipelines run the call loop, and the tool's tokens carry no training loss."""

    name: str = ""  # empty: no tool
    max_calls: int = 2

    def validate(self) -> None:
        check(self.max_calls >= 1, "tools.max_calls", self.max_calls, ">= 1")
        if self.name:
            from rlbench.envs import get_tool, tool_names

            check(self.name in tool_names(), "tools.name", self.name, ", ".join(tool_names()))
            limit = getattr(get_tool(self.name), "max_actions", None)  # what its verifier replays
            if limit is not None:
                check(self.max_calls <= limit, "tools.max_calls", self.max_calls, f"<= {limit} for {self.name}")


# a debug task's workspace layout (rlbench/tasks/planted_bugs.py plants the bug; the workspace text names them)
PIPELINE_DIR = "pipeline"
DIAGNOSIS_FILE = "DIAGNOSIS.md"
RUN_COMMAND = "python -m pipeline.train task=. out=runs/fixed seed=0"


@dataclass
class DebugConfig:
    """Debug tasks: the workspace's `pipeline/` is the reference pipeline with one planted bug
    (rlbench/tasks/planted_bugs.py), chosen per seed from `bugs` (empty: every kind)."""

    pipeline: str = ""  # empty: not a debug task
    bugs: list[str] = field(default_factory=list)

    def validate(self) -> None:
        if not self.pipeline:
            check(not self.bugs, "debug.bugs", self.bugs, "empty without debug.pipeline")
            return
        check(self.pipeline == "grpo", "debug.pipeline", self.pipeline, "grpo (the pipeline with planted bugs)")
        # the kinds in `bugs` are checked against the table by rlbench/tasks/planted_bugs.py's
        # check_kinds when a task loads: this module runs in the sandbox, which hides that table


@dataclass
class BaselineConfig:
    """A working but untuned configuration of a reference pipeline (optimize tasks): the harness
    trains it too, and the agent is scored by how far it gets beyond it."""

    pipeline: str = ""  # empty: the task has none
    settings: dict[str, Any] = field(default_factory=dict)

    def validate(self) -> None:
        if not self.pipeline:
            check(not self.settings, "baseline_config.settings", self.settings, "empty without baseline_config.pipeline")
            return
        from reference_pipelines.registry import load_pipeline_config, pipeline_names

        check(self.pipeline in pipeline_names(), "baseline_config.pipeline", self.pipeline, ", ".join(pipeline_names()))
        load_pipeline_config(self.pipeline, [f"{k}={v}" for k, v in self.settings.items()])


@dataclass
class TaskConfig:
    name: str = MISSING
    version: str = MISSING
    category: Category = MISSING
    difficulty: Difficulty = MISSING
    kind: WorkKind = MISSING
    summary: str = ""
    model: ModelsConfig = field(default_factory=ModelsConfig)
    data: DataConfig = field(default_factory=DataConfig)
    prompt: PromptConfig = field(default_factory=PromptConfig)
    limits: TaskLimits = field(default_factory=TaskLimits)
    reward: RewardConfig = field(default_factory=RewardConfig)
    metric: Metric = Metric.pass_at_1
    eval: EvalProtocol = field(default_factory=EvalProtocol)
    budget: BudgetConfig = field(default_factory=BudgetConfig)
    success: SuccessConfig = field(default_factory=SuccessConfig)
    baseline_config: BaselineConfig = field(default_factory=BaselineConfig)
    constraints: ConstraintConfig = field(default_factory=ConstraintConfig)
    claims: ClaimsConfig = field(default_factory=ClaimsConfig)
    debug: DebugConfig = field(default_factory=DebugConfig)
    tools: ToolsConfig = field(default_factory=ToolsConfig)

    def validate(self) -> None:
        if self.reward.access == RewardAccess.endpoint:
            check(self.budget.max_sweeps == 0, "budget.max_sweeps", self.budget.max_sweeps,
                  "0 when reward.access=endpoint (trials report dev scores, which need answers)")
