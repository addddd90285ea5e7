"""A Ray Tune sweep of an agent's design, run by the harness inside the cell's budget.

Every trial is one training command in the cell's sandbox (the same limits as the agent's own
commands): a reference pipeline (`python -m rlbench.cli pipeline run ALGO ...`) or the agent's
entry point (`python SCRIPT ...`), with the trial's settings as `key=value` arguments and
`out=sweeps/NNN/<trial>` inside the workspace. The trial's `steps.jsonl` (one JSON line per
step; a line with `dev_greedy` is a dev evaluation) is forwarded to Tune with `ray.tune.report`,
so ASHA can stop weak trials early. When the sweep ends the harness scores each finished trial's
`checkpoint` on dev itself, and the best trial is the one with the best harness dev score: a
number the trial's code could not have written. Tune's state lives in the cell folder (outside
the workspace, since restoring a Tune experiment runs code from it), so a stopped sweep resumes.
"""

from __future__ import annotations

import functools
import json
import shlex
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from rlbench import safefs
from rlbench.io import atomic_write_json, atomic_write_text
from rlbench.progress import info, track
from rlbench.sandbox.compute import TRIAL_CPU_DIR, stop_reason, trial_cpu_total
from rlbench.tune.design import Design, param_space

METRIC = "dev"


@dataclass
class SweepJob:
    """What the harness hands a sweep: the design, where it runs, and how long it may take."""

    design: Design
    workspace: Path  # host path of the cell's workspace
    folder: Path  # harness-owned: Tune storage, trial table, result
    out_root: str  # workspace-relative folder of the trial outputs, e.g. sweeps/001
    limits: dict[str, Any]  # the cell's SandboxConfig as a dict
    time_budget_s: float
    seed: int = 0
    max_concurrent: int = 1
    callbacks: list[Any] = field(default_factory=list)  # Tune callbacks, e.g. W&B logging
    # the cell's folder: the driver's STOP_FILE there (a CPU or GPU limit passed) kills the trials' commands
    cell_dir: Path | None = None


def trial_command(design: Design, settings: dict[str, Any], root: str, out: str, seed: int | str, threads: int) -> str:
    """The shell command of one trial, as the sandbox runs it (root: the workspace inside)."""
    args = {**design.hyperparameters, **settings, "out": f"{root}/{out}", "seed": seed,
            "eval_every": design.evaluation.every, "eval_prompts": design.evaluation.prompts,
            "train_limit": design.preprocessing.train_limit, "dedupe": design.preprocessing.dedupe,
            "num_threads": threads}
    if design.algorithm == "custom":
        head = ["python", f"{root}/{design.entry_point}"]
    else:
        head = ["python", "-m", "rlbench.cli", "pipeline", "run", design.algorithm, "--quiet", f"task={root}"]
    return " ".join(shlex.quote(a) for a in head + [f"{k}={_value(v)}" for k, v in args.items()])


def _value(v: Any) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    return repr(v) if isinstance(v, float) else str(v)


def _read_new(workspace: Path, rel: str, offset: int) -> tuple[list[dict[str, Any]], int]:
    """Complete JSON lines of the trial's log `workspace/rel` from byte `offset` on; a half-written
    last line waits. The log is the agent's: read without following links, regular files only,
    at most READ_CAP a poll (a FIFO or link there is read as no lines)."""
    try:
        data = safefs.read_from(workspace, rel, offset)
    except OSError:
        return [], offset
    end = data.rfind(b"\n") + 1
    records = []
    for line in data[:end].splitlines():
        try:
            rec = json.loads(line)
        except json.JSONDecodeError:
            continue  # the trial's own log: a bad line is skipped, not fatal
        if isinstance(rec, dict):
            records.append(rec)
    return records, offset + end


_BARS: dict[str, Any] = {}  # sweep folder -> its progress bar; Tune pickles callbacks, so they hold only the key


def _progress_callback(key: str) -> Any:
    """A Tune callback (run in the driver) that advances the sweep's progress bar as trials end."""
    from ray.tune import Callback

    class Progress(Callback):
        def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self._done(trial, "finished")

        def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
            self._done(trial, "error")

        def _done(self, trial: Any, how: str) -> None:
            bar = _BARS.get(key)
            if bar is not None:
                bar.advance()
                dev = (trial.last_result or {}).get(METRIC)
                bar.update(last=f"{trial.trial_id} {how}" + (f" dev {dev:.3f}" if dev is not None else ""))

    return Progress()


def _metrics(rec: dict[str, Any]) -> dict[str, Any]:
    """One dev line of a trial's steps.jsonl as a Tune report."""
    return {METRIC: float(rec["dev_greedy"]), "step": int(rec.get("step", 0)),
            "reward_mean": float(rec.get("reward_mean", float("nan")))}


def _trainable(spec: dict[str, Any]) -> Callable[[dict[str, Any]], None]:
    """The Tune function trainable (a closure over plain data, so it pickles to any node)."""

    def train(config: dict[str, Any]) -> None:
        from ray import tune

        from rlbench.sandbox.runner import Sandbox, SandboxConfig

        design: Design = spec["design"]
        trial = tune.get_context().get_trial_id()
        limits = SandboxConfig(**spec["limits"])
        limits.threads = design.sweep.trial_cpus
        sandbox = Sandbox(Path(spec["workspace"]), limits, cell_budget_s=spec["time_budget_s"],
                          cpus=design.sweep.trial_cpus)
        if spec["cell_dir"]:  # the cell passed a CPU or GPU limit: the trial's command is killed too
            sandbox.stop_check = functools.partial(stop_reason, Path(spec["cell_dir"]))
            if sandbox.stop_check():  # a trial that starts after that never runs
                raise RuntimeError(f"not run: {sandbox.stop_check()}")
        out = f"{spec['out_root']}/{trial}"
        command = trial_command(design, dict(config), sandbox.root, out, spec["seed"], design.sweep.trial_cpus)
        workspace, steps = Path(spec["workspace"]), f"{out}/steps.jsonl"
        mark = Path(spec["folder"]) / "finished" / trial
        if mark.is_file():  # finished before the sweep was stopped: report it again, do not rerun it
            for rec in _read_new(workspace, steps, 0)[0]:
                if "dev_greedy" in rec:
                    tune.report(_metrics(rec))
            return
        safefs.remove_tree(workspace, out)  # a run cut off midway starts clean (no link followed on the way)
        left = spec["deadline"] - time.time()
        if left <= 5:
            raise RuntimeError("no time left in the sweep's budget for this trial")
        done: dict[str, Any] = {}
        cpu = _TrialCPU(Path(spec["folder"]) / TRIAL_CPU_DIR / trial)
        runner = threading.Thread(target=lambda: done.update(r=sandbox.run(command, timeout=left)), daemon=True)
        runner.start()
        offset, last = 0, None
        while True:
            finished = not runner.is_alive()
            cpu.record(sandbox.cpu_used_s)
            records, offset = _read_new(workspace, steps, offset)
            for rec in records:
                if "dev_greedy" in rec:
                    last = _metrics(rec)
                    tune.report(last)
            if finished:
                break
            runner.join(timeout=1.0)
        result = done["r"]
        if not result.ok:
            tail = (result.stderr or result.stdout)[-1500:]
            raise RuntimeError(f"trial command failed (exit {result.returncode}{', ' + result.killed if result.killed else ''}): {tail}")
        if last is None:
            raise RuntimeError(f"the trial wrote no dev evaluation to {out}/steps.jsonl "
                               "(lines with 'dev_greedy'); Tune had nothing to compare")
        # ran to its end (not stopped by the scheduler): a mark in the harness's folder, not the workspace
        mark.parent.mkdir(parents=True, exist_ok=True)
        mark.touch()

    return train


class _TrialCPU:
    """A trial's CPU seconds: its sandbox's metered total (every process of its command, counted
    where it was spent: rlbench/sandbox/accounting.py), written to the harness's sweep folder about
    every second while the command runs, so a trial the scheduler stops keeps its last reading.
    `trial_cpu_total` (rlbench/sandbox/compute.py) sums them, live for the cell's meter and at the end."""

    def __init__(self, path: Path):
        self.path = path
        self.seconds = 0.0
        path.parent.mkdir(parents=True, exist_ok=True)

    def record(self, seconds: float) -> None:
        if seconds > self.seconds:
            self.seconds = seconds
            self.path.write_text(f"{seconds:.2f}")



def _table(results: Any, job: SweepJob) -> list[dict[str, Any]]:
    rows = []
    for r in results:
        trial = r.metrics.get("trial_id") or Path(r.path).name
        out = f"{job.out_root}/{trial}"
        finished = (job.folder / "finished" / trial).is_file()
        history = r.metrics_dataframe
        rows.append({
            "trial": trial, "config": {k: v for k, v in (r.config or {}).items()},
            "status": "error" if r.error else ("finished" if finished else "stopped"),
            "error": str(r.error).strip().splitlines()[-1][:500] if r.error else "",
            "reports": int(r.metrics.get("training_iteration", 0) or 0),
            "last_step": r.metrics.get("step"), "last_dev": r.metrics.get(METRIC),
            "best_dev": float(history[METRIC].max()) if history is not None and METRIC in history else None,
            "checkpoint": f"{out}/checkpoint" if finished and (job.workspace / out / "checkpoint").is_dir() else "",
        })
    return rows


def run_sweep(job: SweepJob, dev_score: Callable[[str], float]) -> dict[str, Any]:
    """Run (or resume) the sweep; score finished trials with `dev_score(host checkpoint path)`."""
    from ray import tune
    from ray.tune.schedulers import ASHAScheduler, FIFOScheduler

    from rlbench.ray_session import ensure_ray

    design = job.design
    job.folder.mkdir(parents=True, exist_ok=True)
    ensure_ray()
    deadline = time.time() + job.time_budget_s
    spec = {"design": design, "workspace": str(job.workspace), "out_root": job.out_root, "folder": str(job.folder),
            "limits": job.limits, "time_budget_s": job.time_budget_s, "deadline": deadline, "seed": job.seed,
            "cell_dir": str(job.cell_dir) if job.cell_dir is not None else ""}
    trainable = tune.with_resources(_trainable(spec), {"cpu": design.sweep.trial_cpus})
    # one past the last report: ASHA stops a trial that reaches max_t, and the last report comes
    # just before the trial saves its checkpoint
    max_t = max(1, _reports_per_trial(design)) + 1
    scheduler = (ASHAScheduler(time_attr="training_iteration", max_t=max_t, grace_period=min(design.sweep.grace_period, max_t),
                               reduction_factor=design.sweep.reduction_factor)
                 if design.sweep.scheduler == "asha" else FIFOScheduler())
    storage = job.folder / "tune"
    started = time.monotonic()
    callbacks = [_progress_callback(str(job.folder)), *job.callbacks]
    if tune.Tuner.can_restore(storage / "sweep"):
        info(f"sweep {job.folder.name}: resuming from {storage / 'sweep'}")
        tuner = tune.Tuner.restore(str(storage / "sweep"), trainable, resume_errored=False, restart_errored=False)
    else:
        tuner = tune.Tuner(
            trainable, param_space=param_space(design),
            tune_config=tune.TuneConfig(metric=METRIC, mode="max", scheduler=scheduler, num_samples=design.sweep.num_samples,
                                        max_concurrent_trials=job.max_concurrent, time_budget_s=job.time_budget_s),
            run_config=tune.RunConfig(name="sweep", storage_path=str(storage), verbose=0, callbacks=callbacks,
                                      failure_config=tune.FailureConfig(max_failures=0)))
    info(f"sweep {job.folder.name}: {design.trial_count()} trials of {design.algorithm}, {job.max_concurrent} at a time, "
         f"budget {job.time_budget_s:.0f} s")
    with track(f"sweep {job.folder.name}", design.trial_count()) as bar:
        _BARS[str(job.folder)] = bar
        try:
            results = tuner.fit()
        finally:
            _BARS.pop(str(job.folder), None)
    rows = _table(results, job)
    for row in rows:
        row["harness_dev"] = None
        if row["checkpoint"]:
            try:
                row["harness_dev"] = dev_score(str(job.workspace / row["checkpoint"]))
            except Exception as exc:  # noqa: BLE001 - a trial whose checkpoint will not load is not the best
                row["status"], row["error"] = "unloadable", f"{type(exc).__name__}: {exc}"[:500]
    scored = [r for r in rows if r["harness_dev"] is not None]
    best = max(scored, key=lambda r: r["harness_dev"]) if scored else None
    summary = {"ok": best is not None, "algorithm": design.algorithm, "trials": rows,
               "best": ({"trial": best["trial"], "config": {**design.hyperparameters, **best["config"]},
                         "harness_dev": best["harness_dev"], "checkpoint": best["checkpoint"],
                         # the recipe of the best checkpoint: the robustness stage reruns it with other seeds
                         "command": trial_command(design, best["config"], "/workspace", f"{job.out_root}/{best['trial']}",
                                                  "{seed}", design.sweep.trial_cpus)} if best else None),
               "seconds": round(time.monotonic() - started, 1), "cpu_s": trial_cpu_total(job.folder)}
    if best is None:
        summary["error"] = "no trial finished with a checkpoint the harness could score"
    atomic_write_json(job.folder / "result.json", summary)
    atomic_write_text(job.folder / "trials.csv", _csv(rows))
    return summary


def _reports_per_trial(design: Design) -> int:
    """ASHA's max_t: the most dev reports a trial can make."""
    steps = design.hyperparameters.get("steps")
    space = design.search_space.get("steps")
    if steps is None and space is not None:
        kind, args = next(iter(space.items()))
        steps = max(args)
    if steps is None and design.algorithm != "custom":
        from reference_pipelines.registry import config_class

        steps = config_class(design.algorithm)().steps
    if steps is None:
        return 100  # a custom entry point's length is unknown; ASHA needs only an upper bound
    return -(-int(steps) // design.evaluation.every)


def _csv(rows: list[dict[str, Any]]) -> str:
    import csv
    import io

    keys = sorted({k for r in rows for k in r["config"]})
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(["trial", "status", *keys, "reports", "last_step", "last_dev", "best_dev", "harness_dev", "error"])
    for r in rows:
        w.writerow([r["trial"], r["status"], *[r["config"].get(k, "") for k in keys], r["reports"], r["last_step"],
                    r["last_dev"], r["best_dev"], r["harness_dev"], r["error"]])
    return buf.getvalue()
