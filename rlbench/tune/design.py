"""The design file an agent submits (`./grade sweep design.yaml`): what to train and what to search.

    algorithm: grpo            # grpo | ppo | dpo | sft: a reference pipeline; custom: entry_point
    entry_point: ""            # custom: a script in the workspace, run as `python SCRIPT key=value ... out=DIR`
    hyperparameters: {steps: 200, lr: 3.0e-4}        # the same for every trial
    preprocessing: {train_limit: 0, dedupe: false}   # the train split each trial sees
    evaluation: {every: 20, prompts: 200}            # a dev report to Tune every `every` steps
    search_space:
      lr: {loguniform: [1.0e-5, 1.0e-3]}
      group_size: {choice: [4, 8]}
      kl_coef: {grid: [0.0, 0.02]}
      temperature: {uniform: [0.7, 1.2]}
    sweep: {num_samples: 4, scheduler: asha, grace_period: 2, reduction_factor: 2}

Everything is checked before a trial starts, and an error names the key and what is allowed: a
sweep that fails on its third trial has spent the agent's budget for nothing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError, check, load_config

ALGORITHMS = ("grpo", "ppo", "dpo", "sft", "custom")
DISTRIBUTIONS = ("choice", "uniform", "loguniform", "grid")
SCHEDULERS = ("asha", "fifo")
# what the harness sets for every trial: the data, the output folder, the seed, the machine
HARNESS_KEYS = ("task", "out", "seed", "model", "device", "placement", "num_threads", "rollout_cpus",
                "rollout_gpus", "eval_every", "eval_prompts", "train_limit", "dedupe")


@dataclass
class Preprocessing:
    train_limit: int = 0  # the first N train items (0: all of them)
    dedupe: bool = False  # drop repeated prompts

    def validate(self) -> None:
        check(self.train_limit >= 0, "preprocessing.train_limit", self.train_limit, ">= 0 (0: all)")


@dataclass
class Evaluation:
    every: int = 20  # steps between dev reports (each one is a Tune iteration: ASHA decides on them)
    prompts: int = 200  # dev items per report (the harness's own dev score at the end uses them all)

    def validate(self) -> None:
        check(self.every >= 1, "evaluation.every", self.every, ">= 1")
        check(self.prompts >= 1, "evaluation.prompts", self.prompts, ">= 1")


@dataclass
class SweepSettings:
    num_samples: int = 4  # samples of the random dimensions; every grid point gets this many
    scheduler: str = "asha"  # asha | fifo
    grace_period: int = 2  # dev reports before ASHA may stop a trial
    reduction_factor: float = 2.0
    max_concurrent: int = 0  # 0: as many as the cell's CPUs allow
    trial_cpus: int = 1  # threads each trial trains with
    time_budget_s: float = 0.0  # 0: what is left of the cell's budget, less a reserve for submitting
    max_trials: int = 16

    def validate(self) -> None:
        check(self.num_samples >= 1, "sweep.num_samples", self.num_samples, ">= 1")
        check(self.scheduler in SCHEDULERS, "sweep.scheduler", self.scheduler, ", ".join(SCHEDULERS))
        check(self.grace_period >= 1, "sweep.grace_period", self.grace_period, ">= 1")
        check(self.reduction_factor > 1, "sweep.reduction_factor", self.reduction_factor, "> 1")
        check(self.max_concurrent >= 0, "sweep.max_concurrent", self.max_concurrent, ">= 0 (0: as CPUs allow)")
        check(self.trial_cpus >= 1, "sweep.trial_cpus", self.trial_cpus, ">= 1")
        check(self.time_budget_s >= 0, "sweep.time_budget_s", self.time_budget_s, ">= 0 (0: the budget left)")
        check(self.max_trials >= 1, "sweep.max_trials", self.max_trials, ">= 1")


@dataclass
class Design:
    algorithm: str = "grpo"
    entry_point: str = ""
    hyperparameters: dict[str, Any] = field(default_factory=dict)
    preprocessing: Preprocessing = field(default_factory=Preprocessing)
    evaluation: Evaluation = field(default_factory=Evaluation)
    search_space: dict[str, Any] = field(default_factory=dict)
    sweep: SweepSettings = field(default_factory=SweepSettings)

    def validate(self) -> None:
        check(self.algorithm in ALGORITHMS, "algorithm", self.algorithm, ", ".join(ALGORITHMS))
        if self.algorithm == "custom":
            check(self.entry_point.endswith(".py"), "entry_point", self.entry_point or "(empty)",
                  "a Python script in the workspace when algorithm=custom")
            check(not Path(self.entry_point).is_absolute() and ".." not in Path(self.entry_point).parts,
                  "entry_point", self.entry_point, "a path relative to the workspace")
        else:
            check(not self.entry_point, "entry_point", self.entry_point, "empty unless algorithm=custom")
        for key in list(self.hyperparameters) + list(self.search_space):
            check(key not in HARNESS_KEYS, key, "(set by the design)",
                  f"a training setting; the harness sets {', '.join(HARNESS_KEYS)} itself")
        both = set(self.hyperparameters) & set(self.search_space)
        check(not both, "search_space", ", ".join(sorted(both)), "keys not also fixed in hyperparameters")
        for key, spec in self.search_space.items():
            _check_dimension(key, spec)

    def grid_size(self) -> int:
        return math.prod(len(spec["grid"]) for spec in self.search_space.values() if "grid" in spec)

    def trial_count(self) -> int:
        return self.grid_size() * self.sweep.num_samples


def _check_dimension(key: str, spec: Any) -> None:
    where = f"search_space.{key}"
    check(isinstance(spec, dict) and len(spec) == 1 and next(iter(spec)) in DISTRIBUTIONS, where, spec,
          "one of {choice: [..]}, {grid: [..]}, {uniform: [low, high]}, {loguniform: [low, high]}")
    kind, args = next(iter(spec.items()))
    check(isinstance(args, list) and len(args) >= 1, f"{where}.{kind}", args, "a list")
    if kind in ("uniform", "loguniform"):
        ok = len(args) == 2 and all(isinstance(a, (int, float)) and not isinstance(a, bool) for a in args)
        check(ok and args[0] < args[1], f"{where}.{kind}", args, "[low, high] numbers with low < high")
        if kind == "loguniform":
            check(args[0] > 0, f"{where}.{kind}", args, "low > 0")


def load_design(source: Path | dict[str, Any]) -> Design:
    """A design from a YAML/JSON file or a mapping; fields and pipeline settings both checked."""
    design = load_config(Design, source if isinstance(source, dict) else Path(source),
                         source_name=None if isinstance(source, dict) else str(source))
    if design.algorithm != "custom":
        check_pipeline_settings(design)
    if design.trial_count() > design.sweep.max_trials:
        raise ConfigError(f"sweep: {design.trial_count()} trials ({design.grid_size()} grid points x "
                          f"{design.sweep.num_samples} samples) is more than sweep.max_trials={design.sweep.max_trials}")
    return design


def check_pipeline_settings(design: Design) -> None:
    """Every fixed setting and every value the space can take must be a valid pipeline config."""
    from reference_pipelines.registry import config_class, load_pipeline_config

    fields = config_class(design.algorithm).__dataclass_fields__
    for key in list(design.hyperparameters) + list(design.search_space):
        if key not in fields:
            allowed = ", ".join(k for k in fields if k not in HARNESS_KEYS)
            raise ConfigError(f"'{key}' is not a setting of the {design.algorithm} pipeline; allowed: {allowed}")
    for probe in _corners(design):
        try:
            load_pipeline_config(design.algorithm, [f"{k}={v}" for k, v in probe.items()])
        except ConfigError as exc:
            raise ConfigError(f"design: with {probe}: {exc}") from exc


def _corners(design: Design) -> list[dict[str, Any]]:
    """The fixed settings with each end of every dimension: enough to catch a bad value or range."""
    probes = [dict(design.hyperparameters)]
    for key, spec in design.search_space.items():
        kind, args = next(iter(spec.items()))
        for value in ([args[0], args[-1]] if kind in ("uniform", "loguniform") else args):
            probes.append({**design.hyperparameters, key: value})
    return probes


def param_space(design: Design) -> dict[str, Any]:
    """The search space in Ray Tune's terms."""
    from ray import tune

    space: dict[str, Any] = {}
    for key, spec in design.search_space.items():
        kind, args = next(iter(spec.items()))
        space[key] = {"choice": lambda a: tune.choice(a), "grid": lambda a: tune.grid_search(a),
                      "uniform": lambda a: tune.uniform(*a), "loguniform": lambda a: tune.loguniform(*a)}[kind](args)
    return space
