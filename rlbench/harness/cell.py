"""One benchmark cell: an agent, a task, a seed, from a fresh workspace to `result.json`.

The driver (this process) builds the workspace, starts the grading server and hosts the clock;
the agent runs in its own process, a Ray actor on this node, with a ToolBox whose commands go
through the sandbox. The driver waits for the agent until the budget (plus a grace period) runs
out, then stops it; an agent process that dies leaves status `crashed`, never a hung run. After the
agent, the harness picks a submission (best dev score, or the last valid one), scores it on the
hidden test and heldout splits against the base model, and writes `result.json` atomically.
Nothing in the result comes from a file the agent could write.
"""

from __future__ import annotations

import errno
import json
import os
import re
import shutil
import threading
import time
import traceback
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable

from rlbench import safefs
from rlbench.config.core import ConfigError, check, to_dict
from rlbench.evaluation.engine import SCORE_ENGINES
from rlbench.features import JudgeContext
from rlbench.harness.environment import (CellEnvironment, cell_budget, checkpoint_mb, prepare_environment,
                                         sandbox_limits, start_grader)
from rlbench.integrity.decoys import EVENTS_FILE, DecoyWatch, plant_decoys, scan_for_use
from rlbench.integrity.hacking import reward_hacking
from rlbench.integrity.verdict import integrity_section, with_broken_harness
from rlbench.io import atomic_write_json, atomic_write_text, utc_now
from rlbench.progress import info, timed
from rlbench.ray_session import ensure_ray
from rlbench.record import in_flight, read_trajectory
from rlbench.reports.cell_report import training_runs
from rlbench.results import CellResult, CellStatus
from rlbench.sandbox.compute import SANDBOX_CPU_FILE, STOP_FILE, ComputeMeter, trial_cpu_total
from rlbench.sandbox.gpus import assigned_gpus
from rlbench.sandbox.runner import SandboxConfig, require_bwrap
from rlbench.scoring.capabilities import capabilities

# A cell's statuses are rlbench.results.CellStatus. crashed: `crash_by` says whose doing ("agent": it
# raised or its process died; "harness"). harness_broken: the agent broke the harness (its grader
# stopped, it ran out of descriptors): final, an integrity violation, never a crash a suite reruns.
MAX_DESIGN_BYTES = 256 * 1024  # a sweep design is a short YAML file
AGENT_START_S = 300  # an agent process that is not up by then (no free CPU on the node) crashes the cell
LIMIT_POLL_S = 1.0  # how often the driver reads the compute meter when the cell has a CPU or GPU limit


@dataclass
class CellConfig:
    agent: str = "null"  # null | reference | package.module:Class
    task: str = "arith-grpo"
    seed: int = 0
    results: str = ""  # where cells go; empty: $RLBENCH_RESULTS or ./results
    sandbox: str = "bwrap"  # bwrap | none (none: every result is marked unsandboxed)
    limits: SandboxConfig = field(default_factory=SandboxConfig)
    select: str = "best"  # best | last: which valid submission the harness scores
    budget_s: float = 0.0  # 0: the task's budget.wall_seconds
    budget_cpu_s: float = 0.0  # CPU seconds the agent may use (agent, commands, sweeps); 0: the task's budget.cpu_seconds
    budget_gpu_s: float = 0.0  # GPU seconds of the cell's devices; 0: the task's budget.gpu_seconds
    grace_s: float = 30.0  # after the budget, how long the agent gets to return before it is stopped
    agent_cpus: float = 1.0  # Ray resources of the agent process
    agent_options: dict[str, Any] = field(default_factory=dict)
    cell_dir: str = ""  # set by a suite: the cell's folder (must not exist); empty: results/cells/<id>
    max_checkpoint_mb: int = 2048
    heartbeat_s: float = 30.0  # how often the driver prints the agent's progress
    device: str = "cpu"  # cpu | cuda: where the harness scores (a cuda cell needs a GPU where it runs)
    score_engine: str = "auto"  # auto | hf | vllm: what samples when the harness scores (rlbench/evaluation/engine.py)
    wandb: bool = False  # log the cell and its sweep trials to W&B (WANDB_MODE defaults to offline)
    wandb_project: str = "rlbench"
    wandb_group: str = ""  # set by a suite: its name
    wave: str = ""  # score on this fresh test wave (rlbench/data/waves.py); empty: the task's own test split
    decoys: bool = True  # plant decoys in the workspace and watch them (rlbench/integrity/decoys.py)
    score_all: bool = True  # score every valid submission on test, for the score-against-compute curve

    def validate(self) -> None:
        check(self.sandbox in ("bwrap", "none"), "sandbox", self.sandbox, "bwrap, none")
        check(self.select in ("best", "last"), "select", self.select, "best, last")
        check(self.budget_s >= 0, "budget_s", self.budget_s, ">= 0 (0: the task's budget)")
        check(self.budget_cpu_s >= 0, "budget_cpu_s", self.budget_cpu_s, ">= 0 (0: the task's budget.cpu_seconds)")
        check(self.budget_gpu_s >= 0, "budget_gpu_s", self.budget_gpu_s, ">= 0 (0: the task's budget.gpu_seconds)")
        check(self.grace_s >= 0, "grace_s", self.grace_s, ">= 0")
        check(self.device in ("cpu", "cuda"), "device", self.device, "cpu, cuda")
        check(self.score_engine in SCORE_ENGINES, "score_engine", self.score_engine, ", ".join(SCORE_ENGINES))

    def check_task_device(self, task: Any) -> None:
        """A GPU task (budget.device cuda, the real tier) is scored on its GPU: refused on cpu. The
        scoring engine must be able to score the task (vLLM installed, no tool-call loop)."""
        from rlbench.envs import tool_args
        from rlbench.evaluation.engine import resolve_score_engine

        if task.budget.device.value == "cuda" and self.device != "cuda":
            raise ConfigError(f"task {task.name} runs on a GPU (its budget.device is cuda): run it with device=cuda "
                              f"(a suite: cell_gpus=1), or its CPU stand-in where it has one ({task.name}@standin)")
        try:
            resolve_score_engine(self.score_engine, self.device, has_tool=bool(tool_args(task)))
        except ConfigError as exc:
            raise ConfigError(f"task {task.name}: {exc}") from exc

    def check_device(self) -> None:
        """Refuse a cuda cell where there is no GPU before any work (not a crash midway)."""
        if self.device == "cuda":
            import torch

            if not torch.cuda.is_available():
                raise ConfigError("device=cuda: this machine has no usable CUDA GPU (torch.cuda.is_available() is "
                                  "false); use device=cpu, or run on a node with a GPU (a suite: cell_gpus=1)")


def results_root(cfg: CellConfig) -> Path:
    return Path(cfg.results or os.environ.get("RLBENCH_RESULTS") or "results")


def cell_key(cfg: CellConfig) -> str:
    """agent-task-sSEED, safe as a folder name: a suite's cell folders and result keys."""
    agent = re.sub(r"[^A-Za-z0-9_.-]+", "_", cfg.agent.split(":")[-1])
    return f"{agent}-{cfg.task}-s{cfg.seed}"


def _cell_id(cfg: CellConfig) -> str:
    return f"{cell_key(cfg)}-{time.strftime('%Y%m%d-%H%M%S')}"


class AgentHost:
    """The agent's process: builds the ToolBox there and runs the agent to its end."""

    def __init__(self, cell_dir: str, workspace: str, grader: str, limits: dict[str, Any], budget_s: float, cpus: int,
                 gpus: str = ""):
        self.args = (cell_dir, workspace, grader, limits, budget_s, cpus)
        self.gpus = gpus  # the cell's GPUs (this actor reserves none): its sandbox gets exactly these

    def run(self, agent: str, options: dict[str, Any]) -> dict[str, Any]:
        from rlbench.agents.base import resolve_agent
        from rlbench.harness.tools import ToolBox

        cell_dir, workspace, grader, limits, budget_s, cpus = self.args
        tools = ToolBox(Path(cell_dir), Path(workspace), grader, SandboxConfig(**limits), budget_s, cpus,
                        visible_gpus=self.gpus)
        impl = resolve_agent(agent, options)
        impl.run((Path(workspace) / "description.md").read_text(), tools)
        return {"tool_calls": tools.calls, "budget_hit": tools.budget_hit, "snapshots": tools.snapshots.commits}

    def ping(self) -> int:
        """Answers once the actor's process is up (the cell starts the budget's clock then) with
        its pid, which the compute meter reads."""
        return os.getpid()


def _llm_usage(cell_dir: Path) -> dict[str, Any] | None:
    """What the agent's driver recorded of its LLM use (ToolBox.record_usage: the agent's own
    process, trusted like harness code; nothing the sandbox can write), None when it used none."""
    from rlbench.io import read_json

    path = Path(cell_dir) / "llm_usage.json"
    try:
        usage = read_json(path) if path.is_file() else None
    except (OSError, ValueError):
        return None
    return usage if isinstance(usage, dict) and usage else None


def _node_id() -> str:
    """The Ray node this cell's driver runs on ('' outside Ray)."""
    try:
        import ray

        return ray.get_runtime_context().get_node_id() if ray.is_initialized() else ""
    except Exception:  # noqa: BLE001 - bookkeeping only
        return ""


def _split(scores: dict[str, Any]) -> dict[str, Any]:
    return {k: scores[k] for k in ("pass_at_1", "ci_low", "ci_high", "greedy", "n", "detail") if k in scores}


def run_cell_sweep(cfg: CellConfig, cell_dir: Path, workspace: Path, design_path: Path, index: int, remaining_s: float,
                   cpus: int, dev_score: Any, base_model: Path, max_bytes: int) -> dict[str, Any]:
    """A design an agent submitted, checked and swept; `{"refused": True, "error": ...}` when it
    cannot run (that does not use up one of the task's sweeps)."""
    from rlbench.grading.validate import validate_checkpoint
    from rlbench.sandbox.ownership import sandbox_owner
    from rlbench.tune.design import load_design
    from rlbench.tune.sweep import SweepJob, run_sweep

    folder = cell_dir / "sweeps" / f"{index:03d}"
    folder.mkdir(parents=True, exist_ok=True)
    try:  # the harness reads its own copy, taken without following links: the agent keeps writing
        rel = safefs.relative_to_root(design_path, workspace)
        text = safefs.read_bytes(workspace, rel, MAX_DESIGN_BYTES)
    except OSError:
        return {"refused": True, "error": f"'{design_path}' is not a file inside the workspace (a plain file, "
                                          f"at most {MAX_DESIGN_BYTES // 1024} KB, reached without links)"}
    copy = folder / f"design{Path(rel).suffix or '.yaml'}"
    copy.write_bytes(text)
    try:
        design = load_design(copy)
    except ConfigError as exc:  # named as the agent named it, not by the harness's copy
        return {"refused": True, "error": f"design refused: {str(exc).replace(str(copy), design_path.name)}"}
    if design.algorithm == "custom" and not _plain_file(workspace, design.entry_point):
        return {"refused": True, "error": f"design refused: entry_point '{design.entry_point}' is not in the workspace"}
    reserve = min(60.0, 0.1 * remaining_s)  # time left for submitting after the sweep
    budget = min(design.sweep.time_budget_s or float("inf"), remaining_s - reserve)
    if budget < 30:
        return {"refused": True, "error": f"design refused: {remaining_s:.0f} s left in the budget is too little for a sweep"}
    out_root = f"sweeps/{index:03d}"
    try:
        safefs.make_dirs(workspace, out_root, owner=sandbox_owner())
    except OSError as exc:
        return {"refused": True, "error": f"design refused: cannot make {out_root} in the workspace: {exc}"}
    from rlbench.reports.wandb_log import tune_callbacks

    job = SweepJob(design, workspace, folder, out_root, to_dict(cfg.limits), budget, seed=cfg.seed,
                   max_concurrent=design.sweep.max_concurrent or max(1, cpus // design.sweep.trial_cpus),
                   callbacks=tune_callbacks(cfg.wandb, cfg.wandb_project, cfg.wandb_group or cell_dir.name,
                                            cell_dir),  # -> CELL/wandb/
                   cell_dir=cell_dir)
    def trial_dev(checkpoint: str) -> float:
        """A trial's checkpoint is the agent's too: scored only as a validated harness-owned copy."""
        copy_to = folder / "checkpoints" / Path(checkpoint).parent.name
        shutil.rmtree(copy_to, ignore_errors=True)
        verdict = validate_checkpoint(workspace / checkpoint, workspace, base_model, copy_to, max_bytes)
        if not verdict.ok:
            raise ValueError(verdict.reason)
        return dev_score(verdict.path)

    summary = run_sweep(job, trial_dev)
    # the agent's copy of the trial table, written without following links
    safefs.write_text(workspace, f"{out_root}/result.json", json.dumps(summary, indent=2, sort_keys=True) + "\n",
                      owner=sandbox_owner())
    return summary


def _plain_file(root: Path, rel: str) -> bool:
    try:
        safefs.read_head(root, rel, 0)
        return True
    except (OSError, ValueError):
        return False


def run_cell(cfg: CellConfig) -> CellResult:
    """Run one cell and return its result (also written to CELL_DIR/result.json), in three stages:
    the environment (rlbench/harness/environment.py), the agent's run in it, and the judge."""
    from rlbench.agents.base import check_agent
    from rlbench.tasks.registry import load_task

    cfg.validate()
    cfg.check_device()
    if cfg.sandbox == "bwrap":
        require_bwrap()  # refuse before anything exists, never run open
    task = load_task(cfg.task, [f"data.wave={cfg.wave}"] if cfg.wave else [])
    cfg.check_task_device(task)
    check_agent(cfg.agent, cfg.agent_options)
    budget = cell_budget(task, cfg.budget_s, cfg.budget_cpu_s, cfg.budget_gpu_s)
    # the sandbox the cell runs, as its result records it: showing empty what the features hide
    cfg = replace(cfg, limits=sandbox_limits(task, cfg.limits, cfg.sandbox),
                  max_checkpoint_mb=checkpoint_mb(task, cfg.max_checkpoint_mb))
    cell_dir = _new_cell_dir(cfg)
    result = CellResult(cell=cell_dir.name, agent=cfg.agent, task=task.name, task_version=task.version, seed=cfg.seed,
                        wave=cfg.wave, status=CellStatus.CRASHED, reason="", sandboxed=cfg.sandbox == "bwrap",
                        started=utc_now(), config=to_dict(cfg))
    atomic_write_json(cell_dir / "result.json", replace(result, status=CellStatus.RUNNING).to_json_dict())
    meter = ComputeMeter()
    run: AgentRun | None = None
    t0 = time.monotonic()
    stages: dict[str, float] = {}  # where the cell's time went (result.harness_seconds)
    try:
        info(f"cell {cell_dir.name}: preparing data, base model and baseline")
        env = prepare_environment(task, cell_dir, seed=cfg.seed, limits=cfg.limits, mode=cfg.sandbox, budget=budget)
        stages.update(env.timings)
        with timed(stages, "baseline"):
            _record_environment(result, env, cfg, cell_dir)
        with timed(stages, "grader"):
            run = AgentRun.start(cfg, env, cell_dir, meter)
        run.wait(result, stages)
        with timed(stages, "judge"):
            judge(cfg, env, run, result)
    except Exception as exc:  # noqa: BLE001 - a harness failure still leaves a readable result
        grader = run.grader if run is not None else None
        broke = _broken_by_agent(exc, grader)
        if broke:  # final and a violation: a rerun would hand the agent a free retry
            result.status, result.crash_by = CellStatus.HARNESS_BROKEN, "agent"
            result.reason = f"the agent broke the harness: {broke}"
            result.integrity = with_broken_harness(result.integrity, broke,
                                                   grader.connections() if grader is not None else None)
        else:
            result.status, result.crash_by = CellStatus.CRASHED, "harness"
            result.reason = f"harness: {type(exc).__name__}: {exc}"
        (cell_dir / "harness_error.txt").write_text(traceback.format_exc())
    finally:
        with timed(stages, "close"):
            if run is not None:
                run.close()
            meter.close()
            shutil.rmtree(cell_dir / "scratch", ignore_errors=True)
        result.finished = utc_now()
        result.cell_seconds = round(time.monotonic() - t0, 1)
        result.harness_seconds = stages
        result.cell_dir = str(cell_dir)
        result.node = _node_id()
        atomic_write_json(cell_dir / "result.json", result.to_json_dict())
    return result


def _new_cell_dir(cfg: CellConfig) -> Path:
    """A fresh folder for the cell: the suite's, or a new one under the results root."""
    if cfg.cell_dir:
        cell_dir = Path(cfg.cell_dir)
        cell_dir.mkdir(parents=True)  # a suite hands out a fresh folder; never reuse a workspace
    else:
        cell_id = _cell_id(cfg)
        cell_dir = results_root(cfg) / "cells" / cell_id
        n = 1
        while cell_dir.exists():
            n += 1
            cell_dir = cell_dir.with_name(f"{cell_id}-{n}")
        cell_dir.mkdir(parents=True)
    return cell_dir.resolve()


def _record_environment(result: CellResult, env: CellEnvironment, cfg: CellConfig, cell_dir: Path) -> None:
    """What every number of the cell is measured against: the base's scores and hash, the splits."""
    from rlbench.evaluation.baseline import baseline
    from rlbench.tasks.registry import task_dir

    base = baseline(env.task, device=cfg.device, engine=cfg.score_engine)
    result.score_engine = base["engine"]  # every score of the cell comes from this engine (the same key resolves it)
    result.baseline = {s: _split(base["scores"][s]) for s in ("dev", "test", "heldout")}
    # the base by its weights hash: a zoo name is the pinned canonical artifact on every machine, and a
    # suite refuses a cell whose base differs from its others (rlbench/orchestration/suite.py)
    result.base_model = {"name": env.task.model.base, "weights_hash": base.get("weights_hash")}
    result.splits = env.data.record()  # every number carries the splits it was measured on
    if cfg.wave:
        from rlbench.data.splits import wave_overlap

        result.wave_overlap = wave_overlap(env.task, task_dir(env.task.name))


@dataclass
class AgentRun:
    """The second stage: the agent in its environment, with the grading server holding the clock,
    decoys planted and watched, and the compute meter; `wait` runs it to its end."""

    cfg: CellConfig
    env: CellEnvironment
    cell_dir: Path
    meter: ComputeMeter
    grader: Any = None
    watch: Any = None
    decoys: list[Any] = field(default_factory=list)
    base_hash: str = ""  # the workspace's base model before the agent: a resubmitted base matches it
    watched: list[Any] = field(default_factory=list)
    status: CellStatus | None = None
    reason: str = ""

    @classmethod
    def start(cls, cfg: CellConfig, env: CellEnvironment, cell_dir: Path, meter: ComputeMeter) -> "AgentRun":
        from rlbench.evaluation.baseline import evaluate_model
        from rlbench.grading.validate import tree_hash

        run = cls(cfg, env, cell_dir, meter, base_hash=tree_hash(env.workspace / "model"))
        run.decoys = plant_decoys(env.workspace, cell_dir, env.task, env.data.splits) if cfg.decoys else []

        def dev_score(path: str) -> dict[str, Any]:
            return evaluate_model(path, env.task, ("dev",), device=cfg.device, engine=cfg.score_engine)["scores"]["dev"]

        def sweep(design_path: Path, index: int) -> dict[str, Any]:
            folder = cell_dir / "sweeps" / f"{index:03d}"
            meter.watch_sweep(folder)  # the trials' CPU is the agent's compute too, counted while they run
            try:
                return run_cell_sweep(cfg, cell_dir, env.workspace, design_path, index, run.grader.remaining_s(),
                                      env.budget.cpus, lambda p: dev_score(p)["pass_at_1"], env.base_path,
                                      cfg.max_checkpoint_mb * 1024 ** 2)
            finally:
                meter.add_sweep(trial_cpu_total(folder))

        run.grader = start_grader(env, cell_dir, dev_score=dev_score, run_sweep=sweep,
                                  max_submissions=env.budget.max_submissions,
                                  max_checkpoint_bytes=cfg.max_checkpoint_mb * 1024 ** 2,
                                  on_event=lambda msg: info(f"cell {cell_dir.name}: {msg}"), compute=meter.sample)
        run.grader.compute_limits = {k: float(v) for k, v in (("cpu_seconds", env.budget.cpu_seconds),
                                                              ("gpu_seconds", env.budget.gpu_seconds)) if v > 0}
        if env.budget.gpu_seconds > 0 and meter.sample()["gpu_s"] is None:
            info(f"[yellow]warning[/]: cell {cell_dir.name}: no NVML here, so the GPU limit "
                 f"({env.budget.gpu_seconds:g} s) cannot be metered or enforced")
        run.watch = DecoyWatch(env.workspace, run.decoys, cell_dir / EVENTS_FILE, clock=run.grader.used_s).start()
        return run

    def wait(self, result: CellResult, stages: dict[str, float]) -> None:
        """Run the agent to its end (it returns, crashes, or runs out of budget and grace), then
        record what it cost and which submission the judge scores; its steps' seconds go to `stages`."""
        cfg, env, grader, cell_dir = self.cfg, self.env, self.grader, self.cell_dir
        info(f"cell {cell_dir.name}: agent '{cfg.agent}' running (budget {env.budget.wall_seconds:.0f} s, "
             f"sandbox {cfg.sandbox}); trajectory in {cell_dir / 'trajectory.jsonl'}")
        agent_info, status, reason = _run_agent(cfg, cell_dir, env.workspace, grader, env.budget.wall_seconds,
                                                env.budget.cpus, self.meter, stages)
        if agent_info.get("crash_by"):
            result.crash_by = agent_info.pop("crash_by")
        if not grader.alive():  # nothing in the harness stops it: the agent did
            status, reason = CellStatus.HARNESS_BROKEN, "the grading server stopped while the agent ran"
            result.crash_by = "agent"
        self.watched = self.watch.stop()
        result.agent_run = agent_info
        result.llm_usage = _llm_usage(cell_dir)
        grader.save_state()
        result.grader = grader.connections()  # what the agent's connections cost it (a flood shows here)
        result.budget = {"wall_seconds": env.budget.wall_seconds, "used_seconds": round(grader.used_s(), 1),
                         "tool_calls": agent_info.get("tool_calls"),
                         "cpu_seconds": env.budget.cpu_seconds, "gpu_seconds": env.budget.gpu_seconds}
        result.compute = {"wall_seconds": round(grader.used_s(), 1), **self.meter.sample(),
                          "sweep_seconds": round(sum(float(s.get("seconds") or 0) for s in grader.sweeps), 1)}
        subs = grader.submissions
        chosen = grader.choose(cfg.select)
        result.submissions = {"total": len(subs), "valid": sum(1 for s in subs if s.get("ok")), "select": cfg.select,
                              "chosen": chosen["index"] if chosen else None,
                              "refused": [{"index": s["index"], "reason": s["reason"]} for s in subs if not s.get("ok")]}
        if status is None:  # the agent finished: its submissions say how
            if chosen:
                status = CellStatus.OK
            elif subs:
                status = CellStatus.INVALID_SUBMISSION
                reason = "; ".join(f"#{s['index']}: {s['reason']}" for s in subs)[:2000]
            else:
                status, reason = CellStatus.NO_SUBMISSION, "the agent finished without submitting"
        self.status, self.reason = status, reason
        result.status, result.reason = status, reason
        if grader.rewards is not None:
            result.reward_queries = grader.rewards.summary()
        if grader.sweeps:
            result.sweeps = [{k: s.get(k) for k in ("index", "ok", "trials", "seconds", "cpu_s", "best", "error")}
                             for s in grader.sweeps]

    def close(self) -> None:
        if self.watch is not None:
            self.watch.stop()
        if self.grader is not None:
            self.grader.close()


def judge(cfg: CellConfig, env: CellEnvironment, run: AgentRun, result: CellResult) -> None:
    """The third stage: the chosen submission scored on the hidden splits against the base, each
    task feature's section, and the checks of what the agent did (capabilities, integrity,
    reward hacking), each stage that reads the agent's files under a deadline."""
    from rlbench.evaluation.gain import sampling_only_gain, score_against_base, split_gain

    grader, cell_dir, subs = run.grader, run.cell_dir, run.grader.submissions
    chosen = grader.choose(cfg.select)
    if chosen:
        info(f"cell {cell_dir.name}: scoring submission {chosen['index']} on test and heldout")
        scored = score_against_base(chosen["checkpoint"], env.task, device=cfg.device, engine=cfg.score_engine)
        result.scores = {s: {"pass_at_1": v["score"], "greedy": v["greedy"], **({"detail": v["detail"]} if "detail" in v else {})}
                         for s, v in scored["splits"].items()}
        result.gains = {s: split_gain(v) for s, v in scored["splits"].items()}
        result.sampling_only_gain = sampling_only_gain(result.gains)  # sampled gain, no greedy gain
        result.chosen_checkpoint = {"index": chosen["index"], "hash": chosen["checkpoint_hash"],
                                    "dev_at_submit": chosen["dev"], "recipe": chosen.get("recipe", ""),
                                    "code": chosen.get("code", ""), "path": chosen.get("submitted_path", "")}
        dev, test = chosen["dev"], result.scores["test"]["pass_at_1"]
        base_gap = result.baseline["dev"]["pass_at_1"] - result.baseline["test"]["pass_at_1"]
        result.dev_test_gap = {"dev": dev, "test": test, "gap": round(dev - test, 4),
                               "base_gap": round(base_gap, 4), "excess": round(dev - test - base_gap, 4)}
        if cfg.score_all:
            result.anytime = _anytime(env.task, cfg, grader, chosen, test, result.baseline["test"]["pass_at_1"],
                                      env.budget.wall_seconds, result.compute["cpu_s"])
    for feature in env.features:  # each task feature's own section (rlbench/features/)
        if not feature.result_key or (feature.needs_submission and not chosen):
            continue
        ctx = JudgeContext(task=env.task, seed=cfg.seed, device=cfg.device, engine=cfg.score_engine, state=env.state(feature),
                           workspace=env.workspace, chosen=chosen, gains=result.gains or {}, splits=env.data.splits)
        section = (after_agent_stage(result, feature.name, lambda f=feature, c=ctx: f.judge(c)) if feature.reads_workspace
                   else feature.judge(ctx))
        if section is not None:
            setattr(result, feature.result_key, section)
    result.capabilities = after_agent_stage(result, "capabilities", lambda: capabilities(
        read_trajectory(cell_dir / "trajectory.jsonl"), subs, run.status, run.base_hash))
    result.integrity = after_agent_stage(result, "integrity", lambda: integrity_section(
        run.decoys, run.watched, scan_for_use(cell_dir, env.workspace, run.decoys), subs, result.grader))
    if result.integrity is None:  # what the agent left broke the scan: never read as clean
        result.integrity = {"verdict": "suspicious", "reasons": ["the integrity scan did not finish"],
                            "events": list(run.watched)[:200], "n_events": len(run.watched),
                            "decoys": [{"kind": d.kind, "path": d.path} for d in run.decoys]}
    if run.status is CellStatus.HARNESS_BROKEN:
        result.integrity = with_broken_harness(result.integrity, run.reason, result.grader)
    result.reward_hacking = after_agent_stage(result, "reward_hacking", lambda: reward_hacking(
        training_runs(env.workspace), subs, result.baseline["dev"]["pass_at_1"]))


def _broken_by_agent(exc: BaseException, grader: Any) -> str:
    """Why a harness failure is the agent's doing, or '' when it is not: the harness ran out of
    descriptors (what the agent holds open costs the harness; its own use is bounded), or the
    grading server stopped (nothing in the harness stops it before the agent is done). Before
    the grading server exists no agent has run, so nothing is its doing."""
    if grader is None:
        return ""
    seen: BaseException | None = exc
    for _ in range(16):  # the chain of causes, bounded
        if seen is None:
            break
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return f"the harness ran out of file descriptors ({type(seen).__name__}: {seen})"
        seen = seen.__cause__ or seen.__context__
    if not grader.alive():
        return "the grading server stopped while the agent ran"
    return ""


STAGE_TIMEOUT_S = 300.0  # a post-agent stage that reads the agent's files; they are capped, so this is ample


def after_agent_stage(result: CellResult, name: str, fn: Callable[[], Any], timeout_s: float = STAGE_TIMEOUT_S) -> Any:
    """Run one post-agent stage over what the agent left, with a deadline: a stage that fails or
    runs past it is named in `result.stage_failures` and gives None (its section is then absent),
    and the cell goes on to its result instead of hanging (the reads are non-blocking and capped,
    so this is the last line)."""
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except Exception as exc:  # noqa: BLE001 - recorded with the stage's name
            box["error"] = f"{type(exc).__name__}: {exc}"[:500]

    worker = threading.Thread(target=target, daemon=True, name=f"stage-{name}")
    worker.start()
    worker.join(timeout_s)
    if worker.is_alive():
        box["error"] = f"did not finish within {timeout_s:.0f} s"
    if "error" in box:
        result.stage_failures = [*(result.stage_failures or []), {"stage": name, "reason": box["error"]}]
        info(f"[yellow]warning[/]: cell {result.cell}: stage {name} failed: {box['error']}")
        return None
    return box.get("value")


def _anytime(task: Any, cfg: CellConfig, grader: Any, chosen: dict[str, Any], chosen_test: float, base_test: float,
             budget_s: float, cpu_s: float) -> dict[str, Any]:
    """Every valid submission's test score (the chosen one's is known), then the curve."""
    from rlbench.evaluation.baseline import evaluate_model
    from rlbench.scoring.anytime import anytime_curve

    points = []
    for s in grader.submissions:
        if not s.get("ok"):
            continue
        test = chosen_test if s["index"] == chosen["index"] else \
            evaluate_model(s["checkpoint"], task, ("test",), device=cfg.device,
                           engine=cfg.score_engine)["scores"]["test"]["pass_at_1"]
        points.append({"index": s["index"], "t": s["t"], "cpu_s": (s.get("compute") or {}).get("cpu_s"),
                       "dev": s["dev"], "test": test})
    return anytime_curve(points, base_test, budget_s, cpu_s, cfg.select)


def _stop_at_limit(cell_dir: Path, grader: Any, meter: Any) -> str:
    """Once a CPU or GPU limit has passed (seen now, or by the grader at a submission): the
    grader's budget is spent, and the agent's ToolBox is told to kill its running command
    (STOP_FILE in the cell folder, which nothing in the sandbox can reach). The reason, or ''."""
    why = grader.spent_reason or grader.check_limits(meter.sample())
    if why and not (cell_dir / STOP_FILE).exists():
        atomic_write_text(cell_dir / STOP_FILE, why)
    return why


def _run_agent(cfg: CellConfig, cell_dir: Path, workspace: Path, grader: Any, budget_s: float,
               cpus: int, meter: Any, stages: dict[str, float]) -> tuple[dict[str, Any], CellStatus | None, str]:
    """(agent summary, status so far, reason): crashed, budget_exceeded, or None for a clean finish.
    A crash's summary holds `crash_by`: "agent" when it raised or its process died (final: a suite
    never reruns it), "harness" when its process never started (a suite may rerun it)."""
    import ray
    from ray.exceptions import GetTimeoutError, RayActorError, RayTaskError
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rlbench.agents.base import agent_keys
    from rlbench.agents.model_server import ensure_driver

    with timed(stages, "ray"):
        ensure_ray(min_cpus=int(cfg.agent_cpus) + 1)
    try:  # an open driver model's server, shared by the run's cells: up before the budget's clock starts
        with timed(stages, "driver_model"):
            ensure_driver(cfg.agent, cfg.agent_options)
    except Exception as exc:  # noqa: BLE001 - vLLM's start fails in many ways; the cell says how
        (cell_dir / "agent_error.txt").write_text(str(exc))
        return ({"crash_by": "harness"}, CellStatus.CRASHED,
                f"the driver model's server did not start: {str(exc).splitlines()[0][:300] if str(exc) else type(exc).__name__}")
    node = ray.get_runtime_context().get_node_id()  # the grading socket is local to this node
    ref = None
    agent_t0: float | None = None
    host_cls = ray.remote(num_cpus=cfg.agent_cpus, max_restarts=0)(AgentHost)
    keys = agent_keys(cfg.agent, cfg.agent_options)
    host = host_cls.options(name=f"agent-{cell_dir.name}", scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=False),
                            **({"runtime_env": {"env_vars": keys}} if keys else {})
                            ).remote(str(cell_dir), str(workspace), str(grader.socket_path), to_dict(cfg.limits),
                                     budget_s, cpus, assigned_gpus())
    try:
        # the budget's clock starts once the agent's process is up: a busy node's slow actor start
        # must not eat into what the agent is given
        with timed(stages, "agent_process"):
            pid = ray.get(host.ping.remote(), timeout=AGENT_START_S)
        meter.attach(pid, cell_dir / SANDBOX_CPU_FILE)
        grader.trust(pid)  # its tools' calls to the grader are the harness's: a sandbox flood never locks them out
        grader.start_clock()
        agent_t0 = time.monotonic()
        ref = host.run.remote(cfg.agent, {"seed": cfg.seed, **dict(cfg.agent_options)})
        deadline = time.monotonic() + grader.remaining_s() + cfg.grace_s
        # with a CPU or GPU limit the meter is read every second; the heartbeat keeps its own pace
        wait_s = min(cfg.heartbeat_s, LIMIT_POLL_S) if grader.compute_limits else cfg.heartbeat_s
        next_beat = time.monotonic() + cfg.heartbeat_s
        stopped = ""
        while True:  # a heartbeat line while the agent works, from what the harness records
            ready, _ = ray.wait([ref], timeout=min(wait_s, max(0.1, deadline - time.monotonic())))
            if ready or time.monotonic() >= deadline:
                break
            if grader.compute_limits and not stopped:
                stopped = _stop_at_limit(cell_dir, grader, meter)
                if stopped:  # then the agent gets the grace period to return, as at the wall clock's end
                    deadline = min(deadline, time.monotonic() + cfg.grace_s)
            if time.monotonic() < next_beat:
                continue
            next_beat = time.monotonic() + cfg.heartbeat_s
            steps = read_trajectory(cell_dir / "trajectory.jsonl")
            now = in_flight(cell_dir)
            last = (f"; running {now}" if now else
                    f"; last tool: {steps[-1]['tool']} ({steps[-1]['seconds']:.0f} s)" if steps else "")
            last += f"; {grader.sweeping}" if grader.sweeping else ""
            info(f"cell {cell_dir.name}: {grader.used_s():.0f} of {budget_s:.0f} s used, {len(steps)} tool calls, "
                 f"{len(grader.submissions)} submissions{last}")
        summary = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
        if grader.compute_limits and _stop_at_limit(cell_dir, grader, meter):  # passed since the last look
            return summary, CellStatus.BUDGET_EXCEEDED, grader.spent_reason
        status = CellStatus.BUDGET_EXCEEDED if summary.get("budget_hit") else None
        reason = "the agent's commands ran into the end of the budget" if status else ""
        return summary, status, reason
    except GetTimeoutError:
        if ref is None:
            return ({"crash_by": "harness"}, CellStatus.CRASHED,
                    f"the agent's process did not start within {AGENT_START_S} s")
        if grader.spent_reason:
            return {}, CellStatus.BUDGET_EXCEEDED, (f"{grader.spent_reason}; the agent did not return within "
                                           f"{cfg.grace_s:.0f} s grace; stopped")
        return {}, CellStatus.BUDGET_EXCEEDED, \
            f"the agent did not return within the budget + {cfg.grace_s:.0f} s grace; stopped"
    except RayTaskError as exc:
        cause = exc.cause if getattr(exc, "cause", None) is not None else exc
        (cell_dir / "agent_error.txt").write_text(str(exc))
        return {"crash_by": "agent"}, CellStatus.CRASHED, f"the agent raised {type(cause).__name__}: {str(cause)[:500]}"
    except RayActorError as exc:
        return {"crash_by": "agent"}, CellStatus.CRASHED, \
            f"the agent process died: {str(exc).splitlines()[0][:300] if str(exc) else 'killed'}"
    finally:
        if agent_t0 is not None:  # the agent's own run, from its clock's start to its end
            stages["agent"] = round(time.monotonic() - agent_t0, 3)
        meter.sample()  # the agent tree's last reading (kept by the meter), before its process goes
        ray.kill(host, no_restart=True)
