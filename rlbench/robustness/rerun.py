"""Rerun a cell's chosen recipe from scratch: N seeds on the task's base model, one run on its
second size (`model.scale`, S -> M), each graded by the harness on test and heldout.

The recipe is the command the chosen submission carried (`grade submit DIR --recipe CMD`, or a
sweep's best trial command). Each rerun gets a fresh workspace built for its model, the code the
workspace held when the submission was made (from the grader's own repository, so no weights and
no earlier outputs), and the cell's sandbox limits; `{seed}` in the command, and RLBENCH_SEED in
its environment, carry the rerun's seed. The checkpoint it leaves at the submitted path is
validated and scored against that rerun's own base model. Every rerun writes its `result.json`
atomically, so a stopped stage resumes where it was.
"""

from __future__ import annotations

import shutil
import subprocess
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError, check
from rlbench.io import atomic_write_json, read_json, utc_now
from rlbench.progress import info
from rlbench.results import CellResult, CellStatus


@dataclass
class RobustnessConfig:
    seeds: int = 3  # reruns on the base model, seeds cell.seed, cell.seed + 1, ...
    scale: bool = True  # one more rerun on the task's scale model at the cell's seed
    budget_s: float = 0.0  # wall clock of each rerun; 0: the task's budget
    device: str = "cpu"
    # each rerun a Ray task with the task's CPUs, placed like cells (any node that has them, when the
    # results folder is shared); False: one after another in this process
    parallel: bool = True
    gpus: float = 0.0  # GPUs each rerun's task reserves (a suite passes its cell_gpus); 0: one on cuda

    def validate(self) -> None:
        check(self.seeds >= 0, "seeds", self.seeds, ">= 0")
        check(self.budget_s >= 0, "budget_s", self.budget_s, ">= 0 (0: the task's budget)")
        check(self.gpus >= 0, "gpus", self.gpus, ">= 0")

    def resources(self, cpus: float) -> dict[str, float]:
        """What one rerun's Ray task reserves: the task's CPUs and, where the harness scores on a GPU,
        the cell's GPUs (at least one). Ray then narrows CUDA_VISIBLE_DEVICES to them, and the rerun's
        sandbox exposes exactly those devices, as the cell's did; with CPUs alone a GPU task's rerun
        ran with no GPU in its sandbox, or on one another rerun was using."""
        gpus = self.gpus or (1.0 if self.device == "cuda" else 0.0)
        return {"num_cpus": cpus, **({"num_gpus": gpus} if gpus else {})}


def _recipe(cell_dir: Path, result: CellResult) -> dict[str, Any]:
    """The chosen submission's record (recipe, code commit, path), when the cell can be rerun."""
    chosen = dict(result.chosen_checkpoint or {})
    if result.status is not CellStatus.OK or not chosen:
        raise ConfigError(f"{cell_dir}: the cell has no graded submission (status {result.status}); "
                          "nothing to rerun")
    if not chosen.get("recipe"):
        raise ConfigError(f"{cell_dir}: submission {chosen.get('index')} carries no recipe, so it cannot be rerun "
                          "(submit with `--recipe CMD`, or submit a sweep's best checkpoint)")
    if not chosen.get("code") or not (cell_dir / "submitted_code.git").is_dir():
        raise ConfigError(f"{cell_dir}: the code snapshot of submission {chosen.get('index')} is missing")
    return chosen


def _restore_code(cell_dir: Path, commit: str, workspace: Path, submitted: str) -> None:
    """The workspace's files at submission time, without the output folder of the submission
    itself (the rerun writes it anew)."""
    archive = subprocess.run(["git", "-c", "safe.directory=*", f"--git-dir={cell_dir / 'submitted_code.git'}",
                              "archive", "--format=tar", commit], capture_output=True, timeout=300, check=True)
    subprocess.run(["tar", "-x", "-C", str(workspace)], input=archive.stdout, capture_output=True, timeout=300,
                   check=True)
    out = (workspace / submitted).parent
    if out.resolve() != workspace.resolve() and workspace.resolve() in out.resolve().parents:
        shutil.rmtree(out, ignore_errors=True)


def _run_with_heartbeat(sandbox: Any, command: str, budget: float, seed: int, every: float, label: str) -> Any:
    """The recipe in the sandbox, with a progress line every `every` seconds while it trains."""
    done: dict[str, Any] = {}
    worker = threading.Thread(target=lambda: done.update(r=sandbox.run(command, timeout=budget,
                                                                        env={"RLBENCH_SEED": str(seed)})), daemon=True)
    t0 = time.monotonic()
    worker.start()
    while worker.is_alive():
        worker.join(timeout=max(1.0, every))
        if worker.is_alive():
            info(f"{label}: training, {time.monotonic() - t0:.0f} s of at most {budget:.0f} s")
    return done["r"]


def rerun_one(cell_dir: Path, result: CellResult, chosen: dict[str, Any], model: str, kind: str, seed: int,
              cfg: RobustnessConfig) -> dict[str, Any]:
    """One rerun of the recipe: `kind` is base or scale; returns its result (also written to disk)."""
    from rlbench.config.core import load_config
    from rlbench.evaluation.gain import result_gain, score_against_base
    from rlbench.grading.validate import validate_checkpoint
    from rlbench.harness.cell import CellConfig
    from rlbench.harness.environment import cell_budget, needs_grader, prepare_environment, start_grader
    from rlbench.sandbox.ownership import give_tree_to_sandbox
    from rlbench.sandbox.runner import Sandbox
    from rlbench.tasks.registry import load_task

    folder = cell_dir / "robustness" / f"{kind}-s{seed}"
    done = folder / "result.json"
    if done.is_file():
        return read_json(done)
    if folder.exists():  # a rerun cut off before its result: start it again
        shutil.rmtree(folder)
    folder.mkdir(parents=True)
    task = load_task(result.task, [f"data.wave={result.wave}"] if result.wave else [])
    cell_cfg = load_config(CellConfig, dict(result.config or {}), source_name=f"{cell_dir}/result.json config")
    budget = cell_budget(task, cfg.budget_s)
    command = chosen["recipe"].replace("{seed}", str(seed))
    record: dict[str, Any] = {"kind": kind, "model": model, "seed": seed, "command": command, "started": utc_now(),
                              "status": "failed", "reason": ""}
    t0 = time.monotonic()
    grader = None
    try:
        # the cell's environment again, on `model`, with the cell's own feature state (its planted bug)
        env = prepare_environment(task, folder, seed=seed, limits=cell_cfg.limits, mode=cell_cfg.sandbox, budget=budget,
                                  model=model, state_dir=cell_dir)
        workspace = env.workspace
        _restore_code(cell_dir, chosen["code"], workspace, chosen["path"])
        give_tree_to_sandbox(workspace)
        if needs_grader(env):  # the recipe's rewards come from the endpoint, as in the cell
            grader = start_grader(env, folder)
        sandbox = Sandbox(workspace, env.limits, cell_budget_s=budget.wall_seconds, cpus=task.budget.cpus,
                          scratch=folder / "scratch", grader_socket=grader.socket_path if grader is not None else None)
        info(f"robustness {cell_dir.name}: {kind} model {model}, seed {seed}: {command}")
        run = _run_with_heartbeat(sandbox, command, budget.wall_seconds, seed, cell_cfg.heartbeat_s,
                                  f"robustness {cell_dir.name}: {kind} seed {seed}")
        (folder / "log.txt").write_text(f"$ {command}\n[exit {run.returncode}{' ' + run.killed if run.killed else ''}, "
                                        f"{run.seconds:.0f} s]\n--- stdout\n{run.stdout}\n--- stderr\n{run.stderr}\n")
        record.update(returncode=run.returncode, train_seconds=round(run.seconds, 1), killed=run.killed)
        if not run.ok:
            record["reason"] = f"the recipe exited {run.returncode}{' (' + run.killed + ')' if run.killed else ''}; see log.txt"
            return record
        verdict = validate_checkpoint(workspace / chosen["path"], workspace, env.base_path, folder / "checkpoint",
                                      cell_cfg.max_checkpoint_mb * 1024 ** 2)
        if not verdict.ok:
            record.update(status="invalid", reason=verdict.reason.replace(str(workspace), "/workspace"))
            return record
        scored = score_against_base(verdict.path, task, device=cfg.device, base_model=model,
                                    engine=cell_cfg.score_engine)
        record.update(status="ok", checkpoint_hash=verdict.checkpoint_hash,
                      scores={s: {"base": v["base"], "pass_at_1": v["score"], "greedy": v["greedy"]}
                              for s, v in scored["splits"].items()},
                      gains={s: result_gain(v) for s, v in scored["splits"].items()})
        return record
    except Exception as exc:  # noqa: BLE001 - one failed rerun is a result, not the end of the stage
        record["reason"] = f"harness: {type(exc).__name__}: {exc}"
        return record
    finally:
        if grader is not None:
            if grader.rewards is not None:
                record["reward_queries"] = grader.rewards.summary()
            grader.close()
        shutil.rmtree(folder / "scratch", ignore_errors=True)
        shutil.rmtree(folder / "workspace" / "model", ignore_errors=True)  # a copy of a zoo model
        record["seconds"] = round(time.monotonic() - t0, 1)
        record["finished"] = utc_now()
        atomic_write_json(done, record)


def _run_plan(cell_dir: Path, result: CellResult, chosen: dict[str, Any], plan: list[tuple[str, str, int]],
              cfg: RobustnessConfig, cpus: float) -> list[dict[str, Any]]:
    """The reruns of `plan`, in its order: Ray tasks of `cpus` each, run side by side as the
    cluster has room (finished ones are read back, not rerun), or one after another here."""
    todo = [(i, p) for i, p in enumerate(plan) if not (cell_dir / "robustness" / f"{p[0]}-s{p[2]}" / "result.json").is_file()]
    if not cfg.parallel or len(todo) < 2:
        runs = []
        for i, (kind, model, seed) in enumerate(plan, 1):
            info(f"robustness {cell_dir.name}: rerun {i} of {len(plan)}")
            runs.append(rerun_one(cell_dir, result, chosen, model, kind, seed, cfg))
        return runs
    import ray

    from rlbench.progress import quiet
    from rlbench.ray_session import ensure_ray

    ensure_ray(min_cpus=int(cpus), log_to_driver=not quiet())
    reserve = cfg.resources(cpus)
    task = ray.remote(max_retries=0, **reserve)(rerun_one)
    refs = {task.remote(cell_dir, result, chosen, model, kind, seed, cfg): i for i, (kind, model, seed) in todo}
    gpus = f", {reserve['num_gpus']:g} GPUs" if "num_gpus" in reserve else ""
    info(f"robustness {cell_dir.name}: {len(refs)} reruns as Ray tasks ({cpus:g} CPUs{gpus} each)")
    done: dict[int, dict[str, Any]] = {}
    pending = list(refs)
    while pending:
        ready, pending = ray.wait(pending, num_returns=1)
        i = refs[ready[0]]
        try:
            done[i] = ray.get(ready[0])
        except Exception as exc:  # noqa: BLE001 - a rerun whose task died is a failed rerun, not the end of the stage
            kind, model, seed = plan[i]
            done[i] = {"kind": kind, "model": model, "seed": seed, "status": "failed",
                       "reason": f"harness: the rerun's task failed: {type(exc).__name__}: {exc}"[:500]}
        info(f"robustness {cell_dir.name}: {plan[i][0]} seed {plan[i][2]}: {done[i]['status']} "
             f"({len(done)} of {len(refs)} done)")
    return [done[i] if i in done else rerun_one(cell_dir, result, chosen, model, kind, seed, cfg)
            for i, (kind, model, seed) in enumerate(plan)]


def run_robustness(cell_dir: Path, cfg: RobustnessConfig | None = None) -> dict[str, Any]:
    """All reruns of one cell (resuming finished ones) and their aggregate; also written to
    CELL_DIR/robustness/summary.json and into the cell's result.json under `robustness`."""
    from rlbench.scoring.robustness import summarize
    from rlbench.tasks.registry import load_task

    cfg = cfg or RobustnessConfig()
    cfg.validate()
    cell_dir = Path(cell_dir).resolve()
    if not (cell_dir / "result.json").is_file():
        raise ConfigError(f"{cell_dir} is not a cell folder (no result.json)")
    try:
        result = CellResult.load(cell_dir / "result.json")
    except ValueError as exc:
        raise ConfigError(f"{cell_dir}: result.json is not a cell result ({exc})") from exc
    chosen = _recipe(cell_dir, result)
    task = load_task(result.task, [f"data.wave={result.wave}"] if result.wave else [])
    if task.version != result.task_version:
        raise ConfigError(f"{cell_dir}: the cell ran {task.name} v{result.task_version}, the task is now "
                          f"v{task.version}; a rerun would not be comparable")
    plan = [("base", task.model.base, int(result.seed) + i) for i in range(cfg.seeds)]
    if cfg.scale:
        if not task.model.scale:
            info(f"robustness {cell_dir.name}: task {task.name} has no model.scale; the size check is skipped")
        else:
            plan.append(("scale", task.model.scale, int(result.seed)))
    runs = _run_plan(cell_dir, result, chosen, plan, cfg, float(task.budget.cpus))
    summary = summarize(result, chosen["recipe"], runs)
    atomic_write_json(cell_dir / "robustness" / "summary.json", summary)
    result.robustness = summary
    atomic_write_json(cell_dir / "result.json", result.to_json_dict())
    return summary
