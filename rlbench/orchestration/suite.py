"""A suite: the matrix of cells `rlbench run` expands, run in parallel on Ray, resumable.

`agent`, `task`, `seed` name one cell; `agents`, `tasks`, `seeds` (lists) expand to every
combination. Each cell runs as a Ray task that reserves `cell_cpus` (and `cell_gpus`); the agent
process inside it takes no extra reservation, so the cluster's resources bound how many cells run
at once. Everything lands in one suite folder:

    SUITE_DIR/suite.json          the spec and the cell list (written first)
    SUITE_DIR/cells/<key>/        one folder per cell (key: agent-task-sSEED), result.json inside
    SUITE_DIR/results.json        every cell's result, when the suite ends

`resume=SUITE_DIR` reads suite.json, keeps every cell whose result.json has a final status (a crash
the agent caused is final: a rerun would be a free retry), moves unfinished cells and those the
harness crashed aside (`<key>.attempt-N`, for the record) and runs them again from a
fresh workspace. Cells are deterministic given their seed, so a killed-and-resumed suite ends with
the same table as one that ran through.
"""

from __future__ import annotations

import copy
import json
import math
import os
import time
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Iterable

from rlbench.config.core import ConfigError, check, load_config, to_dict
from rlbench.harness.cell import CellConfig, cell_key, results_root, run_cell
from rlbench.io import atomic_write_json, atomic_write_text, read_json
from rlbench.progress import info
from rlbench.ray_session import ensure_ray
from rlbench.results import CellResult, CellStatus
from rlbench.scoring.suite import score_suite, scores_csv


@dataclass
class RobustnessStage:
    """After the cells: rerun the chosen recipes of these agents' cells (robustness stage)."""

    seeds: int = 0  # reruns on the base model per cell; 0: no robustness stage
    scale: bool = True  # also one rerun on the task's scale model
    agents: list[str] = field(default_factory=list)  # empty: every agent whose submission has a recipe
    budget_s: float = 0.0  # per rerun; 0: the task's budget
    parallel: bool = True  # a cell's reruns as Ray tasks side by side (false: one after another in the driver)

    def validate(self) -> None:
        check(self.seeds >= 0, "robustness.seeds", self.seeds, ">= 0 (0: no robustness stage)")
        check(self.budget_s >= 0, "robustness.budget_s", self.budget_s, ">= 0")


@dataclass
class RunSpec(CellConfig):
    agents: list[str] = field(default_factory=list)
    tasks: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=list)
    suite: str = ""  # the suite's name; empty: a timestamp
    resume: str = ""  # a suite folder to finish
    cell_cpus: float = 2.0  # Ray resources each cell reserves (its agent's commands run inside them)
    cell_gpus: float = 0.0
    cell_resources: dict[str, float] = field(default_factory=dict)  # custom Ray resources each cell reserves ({big_disk: 1})
    rerun_crashed: bool = True  # on resume, also rerun cells the harness crashed (never those the agent crashed)
    robustness: RobustnessStage = field(default_factory=RobustnessStage)
    reports: bool = True  # a run report per cell and the suite's leaderboard (HTML, JSON, CSV) at the end

    def validate(self) -> None:
        super().validate()
        check(self.cell_cpus > 0, "cell_cpus", self.cell_cpus, "> 0")
        check(self.cell_gpus >= 0, "cell_gpus", self.cell_gpus, ">= 0")
        check(self.device != "cuda" or self.cell_gpus > 0, "cell_gpus", self.cell_gpus,
              "> 0 with device=cuda (a cell scores on the GPUs it reserves)")
        for name, amount in self.cell_resources.items():
            check(name not in ("CPU", "GPU", "memory", "object_store_memory"), f"cell_resources.{name}", amount,
                  "a custom resource (CPUs and GPUs are cell_cpus and cell_gpus)")
            check(isinstance(amount, (int, float)) and amount > 0, f"cell_resources.{name}", amount, "> 0")

    def reservation(self) -> dict[str, float]:
        """What each cell reserves on its node: CPUs, GPUs and custom resources."""
        return {"CPU": self.cell_cpus, **({"GPU": self.cell_gpus} if self.cell_gpus else {}), **self.cell_resources}


def load_run_spec(overrides: Iterable[str], config_file: str | None = None) -> RunSpec:
    """Defaults, then a suite YAML (e.g. ray_configs/suite-arith.yaml), then key=value overrides."""
    return load_config(RunSpec, config_file, overrides=overrides, source_name=config_file or "rlbench run")


def cell_slots(spec: RunSpec) -> int:
    """How many cells fit the cluster at once by their reservations, node by node (a cell runs on
    one node: two half-free nodes do not make one free slot); 0 when no node can hold one now."""
    import ray

    need = spec.reservation()
    nodes = [n.get("Resources") or {} for n in ray.nodes() if n.get("Alive")]
    return sum(int(min(have.get(k, 0.0) // v for k, v in need.items())) for have in nodes)


def check_placement(spec: RunSpec) -> None:
    """Before the first cell: an error when no node can hold one, since Ray would keep the cells
    pending without a word. (Later, a suite that lost its nodes waits for new ones instead.)"""
    import ray

    if cell_slots(spec) == 0:
        offered = sorted({k for n in ray.nodes() if n.get("Alive") for k in (n.get("Resources") or {})
                          if not k.startswith("node:")})
        raise ConfigError(f"no node of the cluster can hold a cell reserving {spec.reservation()} (its nodes offer: "
                          f"{', '.join(offered) or 'nothing'}); lower cell_cpus/cell_gpus, or start a node with those "
                          "resources (`ray start ... --num-cpus N --resources '{\"NAME\": N}'`)")


def suite_tasks(spec: RunSpec) -> list[str]:
    """The suite's task names; `tasks: [all]` is every task of the tasks folder that runs on the
    suite's device (on cpu the CPU suite, on cuda the real tier too), so a suite of the whole
    benchmark never goes stale when a task is added."""
    if spec.tasks == ["all"]:
        from rlbench.tasks.registry import list_tasks

        return [t.name for t in list_tasks(spec.device)]
    return spec.tasks or [spec.task]


def expand(spec: RunSpec) -> list[CellConfig]:
    cells = []
    base = {k: copy.deepcopy(getattr(spec, k)) for k in CellConfig.__dataclass_fields__}  # not the suite's own keys
    for agent in spec.agents or [spec.agent]:
        for task in suite_tasks(spec):
            for seed in spec.seeds or [spec.seed]:
                cell = CellConfig(**{**base, "agent": agent, "task": task, "seed": seed})
                cell.validate()
                cells.append(cell)
    keys = [cell_key(c) for c in cells]
    if len(set(keys)) != len(keys):
        raise ConfigError(f"the suite names the same cell twice: {sorted(k for k in keys if keys.count(k) > 1)}")
    return cells


def _run_cell_task(cell: dict[str, Any], splits: str = "") -> CellResult:
    from rlbench.harness.cell import CellConfig as _Cell
    from rlbench.sandbox.runner import SandboxConfig

    limits = SandboxConfig(**cell.pop("limits"))
    cfg = _Cell(**cell, limits=limits)
    if splits:
        check_node_splits(cfg, splits)
    return run_cell(cfg)


class NodeMismatch(RuntimeError):
    """A node of the cluster would score a cell on other hidden data than the suite's driver."""


def task_splits(cell: CellConfig, create: bool = True) -> str:
    """The hidden splits a cell's task draws in this process (rlbench/data/splits.py splits_identity)."""
    from rlbench.data.splits import splits_identity
    from rlbench.tasks.registry import load_task

    return splits_identity(load_task(cell.task, [f"data.wave={cell.wave}"] if cell.wave else []), create=create)


def check_node_splits(cell: CellConfig, expected: str) -> None:
    """Refuse to run a cell on a node whose hidden splits are not the driver's: a node with its own
    RLBENCH_HOME (or none) would make a new secret and score the cell on other test items, a wrong
    number that looks right. Every node must share the driver's RLBENCH_HOME and RLBENCH_SPLIT_SEED."""
    import socket

    from rlbench.data.splits import SplitsUnavailable

    try:
        here = task_splits(cell, create=False)
    except SplitsUnavailable as exc:
        here = str(exc)
    if here != expected:
        raise NodeMismatch(
            f"node {socket.gethostname()} would score {cell.task} on other hidden splits than the suite's driver "
            f"(here: {here}; driver: {expected}). Every node needs the driver's RLBENCH_HOME (a shared folder: "
            f"{os.environ.get('RLBENCH_HOME') or 'unset here'}) and RLBENCH_SPLIT_SEED; see ray_configs/README.md")


def _finished(cell_dir: Path, rerun_crashed: bool) -> CellResult | None:
    """The cell's result when a resumed suite keeps it (CellResult.is_final; with rerun_crashed
    off, a crash of the harness too); None when it runs again (unfinished, unreadable, or crashed
    by the harness)."""
    path = cell_dir / "result.json"
    if not path.is_file():
        return None
    try:
        result = CellResult.load(path)
    except (OSError, ValueError):
        return None
    if result.is_final or (result.status is CellStatus.CRASHED and not rerun_crashed):
        return result
    return None


REASON_CHARS = 2000  # a reason is one readable message; the whole text goes to SUITE/errors/<key>.txt


def _task_failure(exc: BaseException, suite_dir: Path, key: str) -> str:
    """Why a cell's Ray task failed, as the cell's reason: the error the task raised (not Ray's
    wrapper with its traceback), with the whole text kept in SUITE/errors/<key>.txt."""
    import traceback

    cause = getattr(exc, "cause", None) or exc  # ray.exceptions.RayTaskError wraps the task's own error
    errors = suite_dir / "errors"
    errors.mkdir(exist_ok=True)
    full = "".join(traceback.format_exception(exc)) + (f"\n{exc}" if cause is not exc else "")
    atomic_write_text(errors / f"{key}.txt", full)
    message = f"{type(cause).__name__}: {cause}".strip()
    if len(message) > REASON_CHARS:
        message = message[:REASON_CHARS] + " ..."
    return f"cell task failed: {message} (whole error: {errors / f'{key}.txt'})"


def _set_aside(cell_dir: Path) -> None:
    n = 1
    while cell_dir.with_name(f"{cell_dir.name}.attempt-{n}").exists():
        n += 1
    cell_dir.rename(cell_dir.with_name(f"{cell_dir.name}.attempt-{n}"))


RESUME_SETTINGS = ("resume", "rerun_crashed")  # what a resume may set; the rest is the saved suite's


def open_suite(spec: RunSpec, create: bool = True) -> tuple[Path, RunSpec]:
    """The suite folder and the spec it runs: a new one (made only with `create`), or the one
    saved in `resume`. A resume runs the saved settings: any other setting given with it is
    refused by name, never silently dropped."""
    if spec.resume:
        given = {f.name: getattr(spec, f.name) for f in fields(RunSpec)
                 if f.name not in RESUME_SETTINGS and getattr(spec, f.name) != getattr(RunSpec(), f.name)}
        if given:
            raise ConfigError(f"resume={spec.resume} runs the suite with its saved settings; refused: "
                              + ", ".join(f"{k}={v}" for k, v in given.items())
                              + " (start a new suite to change them)")
        suite_dir = Path(spec.resume)
        saved = suite_dir / "suite.json"
        if not saved.is_file():
            raise ConfigError(f"resume={spec.resume}: no suite.json there (is it a suite folder?)")
        stored = read_json(saved)["spec"]
        stored.update(resume=str(suite_dir), rerun_crashed=spec.rerun_crashed)
        return suite_dir, load_config(RunSpec, stored, source_name=str(saved))
    name = spec.suite or time.strftime("suite-%Y%m%d-%H%M%S")
    suite_dir = results_root(spec) / "suites" / name
    if suite_dir.exists():
        raise ConfigError(f"suite folder {suite_dir} exists; pick another suite= name or resume={suite_dir}")
    if create:
        suite_dir.mkdir(parents=True)
    return suite_dir, spec


def preflight(spec: RunSpec) -> tuple[list[CellConfig], dict[str, str]]:
    """Everything a suite's cells need, checked before any folder, Ray or cell exists: each task
    loads (with the cell's wave) and runs on the suite's device, each agent resolves, bubblewrap is
    there if a cell wants it, and each base model is its canonical artifact. The cells and the
    bases' hashes."""
    from rlbench.agents.base import check_agent
    from rlbench.sandbox.runner import require_bwrap
    from rlbench.tasks.registry import load_task

    cells = expand(spec)
    for task, wave in sorted({(c.task, c.wave) for c in cells}):
        spec.check_task_device(load_task(task, [f"data.wave={wave}"] if wave else []))
    for agent, options in distinct_agents(cells):
        check_agent(agent, options)
    if any(c.sandbox == "bwrap" for c in cells):
        require_bwrap()
    return cells, suite_bases(cells)


def distinct_agents(cells: list[CellConfig]) -> list[tuple[str, dict[str, Any]]]:
    """Each (agent, agent_options) of the cells once, in a stable order: what is checked, or
    started, once per suite rather than once per cell."""
    keys = sorted({(c.agent, json.dumps(c.agent_options, sort_keys=True, default=str)) for c in cells})
    return [(agent, json.loads(options)) for agent, options in keys]


def _start_drivers(cells: list[CellConfig]) -> None:
    """Start each open driver model's server once, here: actors this process owns live as long as
    the suite, so every cell shares them (one started by a cell would die with it)."""
    from rlbench.agents.model_server import ensure_driver

    for agent, options in distinct_agents(cells):
        served = ensure_driver(agent, options)
        if served is not None:
            info(f"driver model {served.model}: served on {served.device} at {served.base_url} "
                 f"(up in {served.start_s:.0f} s)")


class MixedBases(ConfigError):
    """Cells of one suite scored against different bytes of the same base model: their gains are
    gains on different tasks, so the suite refuses them (its results.json keeps them, marked)."""


def suite_bases(cells: list[CellConfig]) -> dict[str, str]:
    """Each base (and scale) model the suite's tasks name, by the hash its cells must report."""
    from rlbench.models.zoo import model_identity
    from rlbench.tasks.registry import load_task

    names: set[str] = set()
    for c in cells:
        task = load_task(c.task)
        names |= {task.model.base} | ({task.model.scale} if task.model.scale else set())
    return {name: model_identity(name) for name in sorted(names)}


def base_mismatch(result: CellResult, bases: dict[str, str]) -> str:
    """Why a cell's result is not on the suite's base ('' when it is)."""
    b = result.base_model or {}
    want = bases.get(b.get("name", ""))
    if not b.get("weights_hash") or want is None or b["weights_hash"] == want:
        return ""
    return f"its base {b['name']} has weights {b['weights_hash']}, the suite's {want}"


def run_suite(spec: RunSpec) -> tuple[Path, list[CellResult]]:
    """Run (or finish) a suite; returns its folder and every cell's result, in matrix order."""
    import ray

    suite_dir, spec = open_suite(spec, create=False)
    cells, bases = preflight(spec)  # a bad task, agent or base model stops here, before any work
    suite_dir.mkdir(parents=True, exist_ok=bool(spec.resume))
    suite_dir = suite_dir.resolve()
    keys = [cell_key(c) for c in cells]
    saved = read_json(suite_dir / "suite.json") if (suite_dir / "suite.json").is_file() else {}
    changed = {n: (saved["bases"][n], h) for n, h in bases.items()
               if n in (saved.get("bases") or {}) and saved["bases"][n] != h}
    if changed:
        raise MixedBases(f"resume={suite_dir}: the suite ran on other base models: "
                         + "; ".join(f"{n} was {a}, here {b}" for n, (a, b) in changed.items()))
    atomic_write_json(suite_dir / "suite.json", {"spec": to_dict(spec), "cells": keys, "bases": bases})
    results: dict[str, CellResult] = {}
    todo = []
    for key, cell in zip(keys, cells):
        cell_dir = suite_dir / "cells" / key
        done = _finished(cell_dir, spec.rerun_crashed)
        if done is not None:
            results[key] = done
            continue
        if cell_dir.exists():
            _set_aside(cell_dir)
        cell.cell_dir = str(cell_dir)
        cell.agent_cpus = 0.0  # the cell's reservation covers its agent
        cell.wandb_group = cell.wandb_group or suite_dir.name
        todo.append((key, cell))
    if results:
        info(f"suite {suite_dir.name}: {len(results)} of {len(keys)} cells already finished, kept")
    if todo:
        from rlbench.progress import quiet

        # cells print their progress in Ray workers (shown unless quiet); an embedded Ray has at least
        # one cell's CPUs, so a cell that asks for more than this machine's cores still runs here
        ensure_ray(min_cpus=math.ceil(spec.cell_cpus), log_to_driver=not quiet())
        check_placement(spec)
        _start_drivers([c for _, c in todo])
        remote = ray.remote(num_cpus=spec.cell_cpus, num_gpus=spec.cell_gpus, resources=spec.cell_resources or None,
                            max_retries=0)(_run_cell_task)
        by_key = dict(todo)
        # the hidden splits each task is drawn from here: a node that would draw others refuses its cell
        splits = {task: task_splits(cell) for task, cell in {c.task: c for _, c in todo}.items()}
        queue = list(todo)
        pending: dict[Any, str] = {}
        info(f"suite {suite_dir.name}: running {len(queue)} cells ({spec.cell_cpus:g} CPUs each) in {suite_dir}")
        while pending or queue:
            # Ray lends a task's CPUs out while it blocks on its agent, so its reservation alone
            # would let every cell start at once: the driver keeps the cells in flight to what fits
            while queue and len(pending) < max(1, cell_slots(spec)):
                key, cell = queue.pop(0)
                pending[remote.remote({**to_dict(cell), "limits": to_dict(cell.limits)}, splits[cell.task])] = key
            ready, _ = ray.wait(list(pending), num_returns=1, timeout=spec.heartbeat_s)
            if not ready:
                info(f"suite {suite_dir.name}: {len(results)} of {len(keys)} done, {len(pending)} running, "
                     f"{len(queue)} queued")
                continue
            key = pending.pop(ready[0])
            try:
                results[key] = ray.get(ready[0])
            except Exception as exc:  # noqa: BLE001 - the cell's own result.json says what it could
                c = by_key[key]
                results[key] = _finished(suite_dir / "cells" / key, False) or CellResult(
                    cell=key, agent=c.agent, task=c.task, seed=c.seed, sandboxed=c.sandbox == "bwrap",
                    status=CellStatus.CRASHED, crash_by="harness", reason=_task_failure(exc, suite_dir, key))
            info(f"suite {suite_dir.name}: {key}: {results[key].status} ({len(results)} of {len(keys)} done)")
    if spec.robustness.seeds:
        for key in keys:
            results[key] = _robustness(results[key], spec)
    ordered = [results[k] for k in keys]
    refused = {k: why for k in keys if (why := base_mismatch(results[k], bases))}
    for k, why in refused.items():
        results[k].refused_by_suite = why
    atomic_write_json(suite_dir / "results.json", [r.to_json_dict() for r in ordered])
    ordered = [results[k] for k in keys if k not in refused]
    scores = score_suite(ordered)
    atomic_write_json(suite_dir / "scores.json", scores)
    atomic_write_text(suite_dir / "scores.csv", scores_csv(scores))
    if spec.reports:
        write_reports(suite_dir, ordered)
    if spec.wandb:
        from rlbench.reports.wandb_log import log_cell

        for r in ordered:
            log_cell(r, spec.wandb_group or suite_dir.name, spec.wandb_project, suite_dir)  # -> SUITE/wandb/
        info(f"suite {suite_dir.name}: W&B runs in {suite_dir / 'wandb'} (WANDB_MODE={os.environ.get('WANDB_MODE')})")
    if refused:
        raise MixedBases(f"suite {suite_dir}: {len(refused)} cell(s) ran on another base and are left out of its "
                         "scores and leaderboard: " + "; ".join(f"{k}: {w}" for k, w in refused.items()))
    return suite_dir, ordered


def write_reports(suite_dir: Path, results: list[CellResult]) -> None:
    """Each cell's run report and the leaderboard; a report that fails is said, not fatal."""
    from rlbench.reports.cell_html import write_cell_report
    from rlbench.reports.leaderboard import write_leaderboard

    for r in results:
        if r.cell_dir and Path(r.cell_dir).is_dir():
            try:
                write_cell_report(Path(r.cell_dir))
            except Exception as exc:  # noqa: BLE001 - the cell's result stands without its report
                info(f"report {r.cell}: not written ({type(exc).__name__}: {exc})")
    try:
        write_leaderboard(suite_dir)
    except Exception as exc:  # noqa: BLE001
        info(f"leaderboard {suite_dir.name}: not written ({type(exc).__name__}: {exc})")


def _robustness(result: CellResult, spec: RunSpec) -> CellResult:
    """The robustness stage of one finished cell; a cell it does not apply to is returned as it is.
    Its reruns are Ray tasks with the task's CPUs and the cell's GPUs each, placed like cells
    (rlbench/robustness/rerun.py)."""
    from rlbench.robustness.rerun import RobustnessConfig, run_robustness

    stage = spec.robustness
    cell = result
    if stage.agents and cell.agent not in stage.agents:
        return result
    recipe = (cell.chosen_checkpoint or {}).get("recipe")
    if cell.status is not CellStatus.OK or not recipe or not cell.cell_dir:
        if stage.agents:  # asked for by name: say why it did not happen
            info(f"robustness {cell.cell}: skipped (status {cell.status}, recipe {'given' if recipe else 'missing'})")
        return result
    cfg = RobustnessConfig(seeds=stage.seeds, scale=stage.scale, budget_s=stage.budget_s, device=spec.device,
                           parallel=stage.parallel, gpus=spec.cell_gpus)  # a rerun has its cell's GPUs
    try:
        run_robustness(Path(cell.cell_dir), cfg)
    except ConfigError as exc:
        info(f"robustness {cell.cell}: {exc}")
        return result
    return CellResult.load(Path(cell.cell_dir) / "result.json")
