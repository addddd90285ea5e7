"""The `rlbench` command."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional, Sequence

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from rlbench.config.core import ConfigError, to_dict
from rlbench.progress import set_quiet
from rlbench.results import CellResult, Gain
from rlbench.scoring.columns import format_value

app = typer.Typer(add_completion=False, no_args_is_help=True, rich_markup_mode=None,
                  help="rlbench: can an LLM agent build an RL pipeline that really improves a base model?")
tasks_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="List, show and check tasks.")
models_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None, help="The base-model zoo.")
app.add_typer(tasks_app, name="tasks")
app.add_typer(models_app, name="models")
pipeline_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                           help="Reference RL pipelines (grpo, ppo, dpo, sft).")
app.add_typer(pipeline_app, name="pipeline")
agents_app = typer.Typer(no_args_is_help=True, rich_markup_mode=None,
                         help="Coding-agent CLIs run as agents (agent=claude-code, codex, ...).")
app.add_typer(agents_app, name="agents")

out = Console()
if not out.is_terminal:  # logs and pipes: do not wrap tables at 80 columns
    out = Console(width=200)
err = Console(stderr=True, width=None if Console(stderr=True).is_terminal else 200)

OverridesArg = typer.Argument(None, help="key=value overrides of the config, e.g. eval.temperature=0.7")
QuietOpt = typer.Option(False, "--quiet", "-q", help="No progress output (also RLBENCH_QUIET=1).")


def _fail(exc: Exception) -> None:
    err.print(f"[bold red]error:[/] {exc}", highlight=False)
    raise typer.Exit(code=2)


def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}"


@tasks_app.command("list")
def tasks_list() -> None:
    """All tasks with their category, kind of work, difficulty, base model, data and budget."""
    from rlbench.tasks.registry import list_tasks, variants

    try:
        tasks = list_tasks()
    except ConfigError as exc:
        _fail(exc)
    from rlbench.orchestration.validation import load_validations

    validations = load_validations()
    table = Table(title="rlbench tasks")
    for col in ("name", "version", "category", "kind", "difficulty", "base model", "data", "rewards", "budget", "validated"):
        table.add_column(col)
    for t in tasks:
        b = t.budget
        budget = f"{b.wall_seconds // 60} min, {b.max_submissions} subm." + (f", {b.max_sweeps} sweeps" if b.max_sweeps else "")
        budget += f", {b.device.value}"
        rewards = t.reward.access.value + (f" ({b.reward_queries:,} queries)" if t.reward.access.value == "endpoint" else "")
        v = validations.get(t.name)
        state = "-" if not v or v.get("version") != t.version else ("passed" if v["passed"] else "failed")
        name = t.name + "".join(f"\n  @{v}" for v in variants(t.name))  # e.g. the real tier's CPU stand-in
        table.add_row(name, t.version, t.category.value, t.kind.value, t.difficulty.value, t.model.base, t.data.origin(), rewards,
                      budget, state)
    out.print(table)


@tasks_app.command("validate")
def tasks_validate(name: str, overrides: Optional[List[str]] = OverridesArg, quiet: bool = QuietOpt) -> None:
    """Run the null and reference agents on 3 seeds and check that the task discriminates: null gain
    indistinguishable from zero, reference gain above zero on 2 of 3 seeds, every cell within 20 min.
    Writes tasks/NAME/validation.json (`write=false`: only print). Options: seeds=N max_cell_s=S
    sandbox=bwrap|none results=DIR."""
    from rlbench.config.core import load_config
    from rlbench.sandbox import SandboxUnavailable, require_bwrap
    from rlbench.orchestration.validation import ValidationConfig, table_markdown, validate_task
    from rlbench.tasks.registry import load_task

    set_quiet(quiet)
    try:
        cfg = load_config(ValidationConfig, None, overrides=overrides or [], source_name="rlbench tasks validate")
        task = load_task(name)
        if cfg.sandbox == "bwrap":
            require_bwrap()
        record = validate_task(name, cfg)
    except (ConfigError, SandboxUnavailable) as exc:
        _fail(exc)
    for check_name, c in record["checks"].items():
        out.print(f"{'[green]ok[/]' if c['ok'] else '[red]FAILED[/]'}  {check_name}: "
                  + ", ".join(f"{k}={v}" for k, v in c.items() if k != "ok"))
    out.print(table_markdown([task], {name: record}), highlight=False, markup=False)
    out.print(f"{name}: validation {'passed' if record['passed'] else 'FAILED'} in {record['seconds']:.0f} s; "
              f"suite {record['suite']}" + (f"; written to tasks/{name}/validation.json" if cfg.write else ""),
              highlight=False)
    if not record["passed"]:
        raise typer.Exit(1)


@tasks_app.command("table")
def tasks_table(write: bool = typer.Option(False, "--write", help="Rewrite the table in tasks/README.md.")) -> None:
    """The table of every task's validation (base score, null and reference gains), as markdown."""
    from rlbench.paths import tasks_root
    from rlbench.tasks.registry import list_tasks
    from rlbench.orchestration.validation import load_validations, table_markdown, write_readme_table

    try:
        table = table_markdown(list_tasks(), load_validations())
    except ConfigError as exc:
        _fail(exc)
    out.print(table, highlight=False, markup=False, soft_wrap=True)
    if write:
        write_readme_table(tasks_root() / "README.md", table)
        out.print(f"written: {tasks_root() / 'README.md'}", highlight=False)


@tasks_app.command("waves")
def tasks_waves(
    name: str,
    models: Optional[List[str]] = typer.Argument(None, help="model references or checkpoint folders (default: the base)"),
    waves: str = typer.Option("standard,wave-a,wave-b", help="comma-separated wave names; `standard`: the task's own splits; `public`, `secret`: "
                                    "them drawn from the task file's seed, from this installation's secret"),
    splits: str = typer.Option("test,heldout", help="comma-separated hidden splits"),
    device: str = typer.Option("cpu", help="cpu or cuda"),
    output: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON here."),
    quiet: bool = QuietOpt,
) -> None:
    """Score models on several test waves and check that the waves agree: each wave's score against
    the first's, within the 95% interval of their difference. Exits 1 when a wave disagrees."""
    from rlbench.evaluation.wave_compare import compare_waves
    from rlbench.io import atomic_write_json
    from rlbench.tasks.registry import load_task

    set_quiet(quiet)
    try:
        task = load_task(name)
        result = compare_waves(task, models or [task.model.base], [w for w in waves.split(",") if w],
                               [s for s in splits.split(",") if s], device=device)
    except ConfigError as exc:
        _fail(exc)
    table = Table(title=f"{name}: test waves compared (pass@1 %, 95% CI; difference against {result['waves'][0]})")
    for col in ("model", "split", "wave", "score", "95% CI", f"on {result['waves'][0]}", "difference", "±95%", "agree"):
        table.add_column(col, justify="left" if col in ("model", "split", "wave") else "right")
    labels = {m: m if len(m) <= 40 else "…/" + "/".join(Path(m).parts[-3:]) for m in result["models"]}
    if len(set(labels.values())) < len(labels):  # two checkpoints end alike: whole paths
        labels = {m: m for m in labels}
    for r in result["rows"]:
        table.add_row(labels[r["model"]], r["split"], r["wave"], _pct(r["score"]), f"[{_pct(r['ci'][0])}, {_pct(r['ci'][1])}]",
                      _pct(r["against_score"]), f"{100 * r['diff']:+.1f}", f"{100 * r['diff_halfwidth']:.1f}",
                      "[green]yes[/]" if r["agree"] else "[red]no[/]")
    out.print(table)
    for model, label in labels.items():  # a checkpoint's whole path, once, below the table
        if label != model:
            out.print(f"{label} = {model}", highlight=False, soft_wrap=True)
    if output is not None:
        atomic_write_json(output, result)
        out.print(f"written: {output}", highlight=False)
    if not result["agree"]:
        raise typer.Exit(1)


@tasks_app.command("baselines")
def tasks_baselines(
    names: Optional[List[str]] = typer.Argument(None, help="tasks (default: all)"),
    write: bool = typer.Option(False, "--write", help="Write tasks/NAME/baseline.json."),
    quiet: bool = QuietOpt,
) -> None:
    """Each task's base model on its public-seed test and heldout splits, and how far this
    installation's secret draw lies from them, against the 95% interval of the difference. Exits 1
    when a difference passes twice that interval (another task, not chance)."""
    from rlbench.evaluation.task_baselines import record_baseline, write_baseline
    from rlbench.tasks.registry import list_tasks, load_task

    set_quiet(quiet)
    try:
        tasks = [load_task(n) for n in names] if names else list_tasks("cpu")  # the real tier's by name, on its GPUs
    except ConfigError as exc:
        _fail(exc)
    table = Table(title="base-model baselines (pass@1 %): public-seed splits, and this installation's secret draw")
    for col in ("task", "base", "split", "n", "public", "95% CI", "secret", "difference", "±95%", "agree"):
        table.add_column(col, justify="left" if col in ("task", "base", "split") else "right")
    same = True
    for task in tasks:
        try:
            rec = record_baseline(task)
        except ConfigError as exc:
            _fail(exc)
        same &= rec["same_task"]
        for split, r in rec["splits"].items():
            sec = r.get("secret")
            table.add_row(task.name, f"{rec['base_model']} {rec['weights_hash'][:8]}", split, str(r["n"]),
                          _pct(r["pass_at_1"]), f"[{_pct(r['ci'][0])}, {_pct(r['ci'][1])}]",
                          _pct(sec["pass_at_1"]) if sec else "-", f"{100 * sec['diff']:+.1f}" if sec else "-",
                          f"{100 * sec['diff_halfwidth']:.1f}" if sec else "-",
                          ("[green]yes[/]" if sec["agree"] else "[yellow]no (chance)[/]" if sec["same_task"]
                           else "[red]no: another task[/]") if sec else "fixed data")
        if write:
            out.print(f"written: {write_baseline(task, rec)}", highlight=False)
    out.print(table)
    if not same:
        raise typer.Exit(1)


@tasks_app.command("show")
def tasks_show(name: str, overrides: Optional[List[str]] = OverridesArg) -> None:
    """The resolved task config (after overrides) and the description the agent reads."""
    import yaml

    from rlbench.tasks.registry import load_task, task_dir

    try:
        task = load_task(name, overrides or [])
    except ConfigError as exc:
        _fail(exc)
    out.print(f"[bold]{task.name}[/] v{task.version} — {task.summary}")
    out.print(yaml.safe_dump(to_dict(task), sort_keys=False), highlight=False, markup=False)
    out.rule("description.md")
    out.print((task_dir(name) / "description.md").read_text(), highlight=False, markup=False)


@agents_app.command("list")
def agents_list() -> None:
    """Each coding-agent CLI: its package, whether it is installed, the API hosts it may reach and
    whether its key is set in this environment."""
    import os

    from rlbench.agents.cli_install import listing

    table = Table(title="coding-agent CLIs (agent=NAME)")
    for col in ("name", "package", "installed", "API hosts", "key"):
        table.add_column(col)
    for spec, inst in listing():
        keys = [k for k in spec.keys if os.environ.get(k)]
        have = bool(keys) if spec.any_key else len(keys) == len(spec.keys)
        table.add_row(spec.name, f"{spec.package}@{spec.version}", f"yes ({inst.source})" if inst else "no",
                      ", ".join(spec.hosts), ("set: " if have else "missing: ") + (" or " if spec.any_key else ", ").join(
                          keys if have else spec.keys))
    out.print(table)


@agents_app.command("install")
def agents_install(
    name: str = typer.Argument(..., help="a CLI of `rlbench agents list`"),
    source: str = typer.Option("", "--from", help="install this instead of the pinned version: another version "
                               "spec, or a local package folder or archive (no registry needed)"),
) -> None:
    """Install a coding-agent CLI under RLBENCH_HOME/agents/NAME (npm or a virtualenv), where cells
    mount it read-only."""
    from rlbench.agents.cli_install import install

    try:
        done = install(name, source, log=lambda m: err.print(m, highlight=False))
    except ConfigError as exc:
        _fail(exc)
    out.print(f"installed {name}: {done.executable} ({done.source})", highlight=False)


@models_app.command("list")
def models_list() -> None:
    """Zoo recipes: size, parameter count, the canonical artifact's hash and size, local builds."""
    from rlbench.models.pretrain import make_model
    from rlbench.models.recipe import recipe_hash
    from rlbench.models.tokenizer import DEFAULT_ALPHABET, build_char_tokenizer
    from rlbench.models.zoo import build_dir, is_built, load_recipe, model_meta, param_count, pins, recipe_names

    pinned = pins()
    table = Table(title="rlbench model zoo")
    for col in ("name", "size", "parameters", "recipe hash", "canonical sha256", "MB", "local build"):
        table.add_column(col)
    for name in recipe_names():
        recipe = load_recipe(name)
        meta = model_meta(build_dir(recipe)) if is_built(recipe) else None
        p = pinned.get(name)
        params = p.parameters if p else meta["parameters"] if meta else \
            param_count(make_model(recipe, build_char_tokenizer(recipe.alphabet or DEFAULT_ALPHABET)))
        table.add_row(name, recipe.size, f"{params:,}", recipe_hash(recipe), p.sha256[:16] if p else "-",
                      f"{p.bytes / 1e6:.1f}" if p else "-", str(build_dir(recipe)) if meta else "-")
    out.print(table)


@models_app.command("verify")
def models_verify(
    names: Optional[List[str]] = typer.Argument(None, help="Canonical models to check (default: all)."),
) -> None:
    """Check canonical models: their files hash to the pin, their recipe is the pinned one, and they
    load with from_pretrained. Exits 1 on any failure."""
    from rlbench.models.zoo import load_model, pins, verify_canonical

    table_pins = pins()
    unknown = sorted(set(names or ()) - set(table_pins))
    if unknown:
        raise typer.BadParameter(f"not canonical: {', '.join(unknown)} (canonical: {', '.join(table_pins)})")
    chosen = {n: p for n, p in table_pins.items() if not names or n in names}
    table = Table(title="canonical models")
    for col in ("name", "sha256", "MB", "parameters", "steps", "check"):
        table.add_column(col)
    failed = 0
    for name, p in chosen.items():
        try:
            verify_canonical(name)
            load_model(name)
            check = "[green]ok[/]"
        except ConfigError as exc:
            failed += 1
            check = f"[red]{exc}[/]"
        table.add_row(name, p.sha256[:16], f"{p.bytes / 1e6:.1f}", f"{p.parameters:,}", str(p.steps), check)
    out.print(table)
    if failed or not chosen:
        err.print(f"[red]{failed} of {len(chosen)} canonical models failed[/]" if chosen else "[red]no canonical models[/]")
        raise typer.Exit(1)


@models_app.command("build")
def models_build(
    name: str,
    overrides: Optional[List[str]] = OverridesArg,
    force: bool = typer.Option(False, "--force", help="Rebuild even if an identical build exists."),
    quiet: bool = QuietOpt,
) -> None:
    """Pretrain a zoo model by its recipe (cached by recipe hash under RLBENCH_HOME) and say whether
    it reproduced the canonical artifact's weights. Tasks always load the canonical artifact."""
    from rlbench.models.recipe import recipe_hash
    from rlbench.models.zoo import build, load_recipe, model_meta, pins

    set_quiet(quiet)
    try:
        recipe = load_recipe(name, overrides or [])
        path = build(recipe, force=force)
    except ConfigError as exc:
        _fail(exc)
    meta = model_meta(path) or {}
    curve = meta.get("pretrain", {}).get("curve", [])
    last = curve[-1] if curve else {}
    out.print(f"{name}: {meta.get('parameters', 0):,} parameters, {meta.get('pretrain', {}).get('steps')} steps, "
              f"calibration greedy accuracy {_pct(last.get('calib_greedy_acc'))}%, "
              f"built in {meta.get('build_seconds')} s")
    out.print(str(path), highlight=False)
    p = pins().get(name)
    if p is None:
        out.print(f"{name} has no canonical artifact: this build is what `{name}` loads on this machine")
    elif recipe_hash(recipe) != p.recipe_hash:
        out.print(f"not the canonical recipe (recipe hash {recipe_hash(recipe)}, pinned {p.recipe_hash}): "
                  f"tasks load the canonical {name}, not this build")
    elif meta.get("weights_hash") == p.weights_hash:
        out.print(f"[green]reproduced the canonical {name} (weights {p.weights_hash})[/]")
    else:
        out.print(f"[yellow]differs from the canonical {name}: weights {meta.get('weights_hash')}, pinned "
                  f"{p.weights_hash}. This CPU computes other floats; tasks load the canonical artifact, "
                  "never this build[/]")


@models_app.command("pin")
def models_pin(name: str, quiet: bool = QuietOpt) -> None:
    """For maintainers: build NAME from its current recipe and make the build its canonical artifact
    (rlbench/models/canonical/NAME, hashes in pins.json). Revalidate and bump every task on it."""
    from rlbench.models.zoo import build, load_recipe, pin

    set_quiet(quiet)
    try:
        row = pin(name, build(load_recipe(name)))
    except ConfigError as exc:
        _fail(exc)
    out.print(f"pinned {name}: sha256 {row.sha256}, weights {row.weights_hash}, {row.bytes / 1e6:.1f} MB, "
              f"{row.parameters:,} parameters, {row.steps} steps")


@app.command("baseline")
def baseline_cmd(
    task_name: str = typer.Argument(..., metavar="TASK"),
    overrides: Optional[List[str]] = OverridesArg,
    device: str = typer.Option("cpu", help="cpu or cuda"),
    engine: str = typer.Option("auto", help="what samples: hf, vllm, or auto (vllm on cuda where it serves, else hf)"),
    no_cache: bool = typer.Option(False, "--no-cache", help="Re-evaluate even if a cached score exists."),
    output: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON here."),
    quiet: bool = QuietOpt,
) -> None:
    """Score the task's base model on dev, test and heldout with the task's protocol."""
    from rlbench.evaluation.baseline import baseline
    from rlbench.io import atomic_write_json
    from rlbench.tasks.registry import load_task

    set_quiet(quiet)
    try:
        task = load_task(task_name, overrides or [])
        result = baseline(task, device=device, use_cache=not no_cache, engine=engine)
    except ConfigError as exc:
        _fail(exc)
    p = task.eval
    table = Table(title=f"baseline {task.name} v{task.version} — {result['model']} "
                        f"(k={p.samples_per_prompt}, T={p.temperature}, seed={p.seed}, engine {result['engine']})")
    for col in ("split", "n", "pass@1 %", "95% CI", "greedy %", "greedy 95% CI"):
        table.add_column(col, justify="right" if col != "split" else "left")
    for split, s in result["scores"].items():
        table.add_row(split, str(s["n"]), _pct(s["pass_at_1"]), f"[{_pct(s['ci_low'])}, {_pct(s['ci_high'])}]",
                      _pct(s["greedy"]), f"[{_pct(s['greedy_ci_low'])}, {_pct(s['greedy_ci_high'])}]")
    out.print(table)
    prints = ", ".join(f"{split} {fp[:16]}" for split, fp in result["fingerprints"].items())
    out.print(f"splits: {result.get('seed_source', 'unrecorded')} seed; fingerprints {prints}", highlight=False)
    if output is not None:
        atomic_write_json(output, {k: v for k, v in result.items() if k != "path"})
        out.print(f"written: {output}", highlight=False)
    out.print(f"{'cached' if result['cached'] else 'stored'}: {result['path']}", highlight=False)


def _gain_table(result: dict) -> Table:
    table = Table(title=f"{result['task']}: {result['checkpoint']} against {result['base_model']} "
                        f"(harness evaluation, engine {result.get('engine', 'hf')})")
    for col in ("split", "base pass@1 %", "pass@1 %", "abs. gain", "95% CI of gain", "rel. gain %",
                "base greedy %", "greedy %", "greedy gain", "95% CI of greedy gain"):
        table.add_column(col, justify="left" if col == "split" else "right")
    for split, g in result["splits"].items():
        rel = "-" if g["rel_gain_pct"] is None else f"{g['rel_gain_pct']:+.0f}"
        table.add_row(split, _pct(g["base"]), _pct(g["score"]), f"{100 * g['abs_gain']:+.1f}",
                      f"[{100 * g['gain_ci_low']:+.1f}, {100 * g['gain_ci_high']:+.1f}]", rel,
                      _pct(g["base_greedy"]), _pct(g["greedy"]), *_greedy_cells(g.get("greedy_gain")))
    return table


@app.command("evaluate")
def evaluate_cmd(
    checkpoint: str = typer.Argument(..., help="a checkpoint folder (or any model reference)"),
    task_name: str = typer.Argument(..., metavar="TASK"),
    overrides: Optional[List[str]] = OverridesArg,
    device: str = typer.Option("cpu", help="cpu or cuda"),
    engine: str = typer.Option("auto", help="what samples: hf, vllm, or auto (vllm on cuda where it serves, else hf)"),
    output: Optional[Path] = typer.Option(None, "--out", help="Also write the JSON here."),
    quiet: bool = QuietOpt,
) -> None:
    """Score a checkpoint on the task's dev, test and heldout splits against the base model."""
    from rlbench.evaluation.gain import score_against_base
    from rlbench.io import atomic_write_json
    from rlbench.tasks.registry import load_task

    set_quiet(quiet)
    try:
        task = load_task(task_name, overrides or [])
        result = score_against_base(checkpoint, task, device=device, engine=engine)
    except ConfigError as exc:
        _fail(exc)
    out.print(_gain_table(result))
    if output is not None:
        atomic_write_json(output, result)
        out.print(f"written: {output}", highlight=False)


@pipeline_app.command("list")
def pipeline_list() -> None:
    """The reference pipelines and their config fields."""
    import dataclasses

    from reference_pipelines.registry import config_class, pipeline_names

    for name in pipeline_names():
        cls = config_class(name)
        fields = ", ".join(f"{f.name}={getattr(cls(), f.name)!r}" for f in dataclasses.fields(cls))
        out.print(f"[bold]{name}[/]: {fields}", highlight=False)


@pipeline_app.command("run")
def pipeline_run(
    name: str = typer.Argument(..., help="grpo, ppo, dpo or sft"),
    overrides: Optional[List[str]] = OverridesArg,
    evaluate: bool = typer.Option(False, "--evaluate", help="Score the final checkpoint with the harness afterwards."),
    config: Optional[Path] = typer.Option(None, "--config", help="A YAML of settings (placement, resources, ...)."),
    quiet: bool = QuietOpt,
) -> None:
    """Run a reference pipeline on a task: `rlbench pipeline run grpo task=arith-grpo steps=500`."""
    from reference_pipelines.registry import load_pipeline_config, run_pipeline

    set_quiet(quiet)
    try:
        cfg = load_pipeline_config(name, overrides or [], str(config) if config else None)
        summary = run_pipeline(name, cfg)
    except ConfigError as exc:
        _fail(exc)
    out.print(f"{name} on {cfg.task}: {summary['steps']} steps in {summary['seconds']} s; "
              f"steps log {Path(summary['checkpoint']).parent / 'steps.jsonl'}", highlight=False)
    out.print(f"checkpoint: {summary['checkpoint']}", highlight=False)
    if evaluate:
        from rlbench.evaluation.gain import score_against_base
        from rlbench.io import atomic_write_json
        from rlbench.tasks.registry import load_task

        result = score_against_base(summary["checkpoint"], load_task(cfg.task), device=cfg.device)
        atomic_write_json(Path(summary["checkpoint"]).parent / "evaluation.json", result)
        out.print(_gain_table(result))


def _greedy_cells(g: dict | None) -> tuple[str, str]:
    """The paired greedy gain and its interval, in points."""
    return (_pts(g["abs"]), _ci([g["ci_low"], g["ci_high"]])) if g else ("-", "-")


def _pts(x: float | None, sign: bool = True) -> str:
    return format_value(x, "pts" if sign else "pts_abs")


def _ci(pair: list | None) -> str:
    return format_value(pair, "ci")


def _cells_table(rows: list[dict]) -> Table:
    """Rows of rlbench.scoring.suite.score_suite, in the terminal columns rlbench/scoring/columns.py
    declares: gains in points with paired bootstrap 95% intervals."""
    from rlbench.scoring.columns import CELL_COLUMNS, terminal_table

    return terminal_table("rlbench cells (harness evaluation on hidden splits; gains paired against the base model, "
                          "95% bootstrap intervals)", CELL_COLUMNS, rows)


def _robustness_table(summary: dict) -> Table:
    table = Table(title=f"robustness of {summary['cell']}: recipe rerun from the base model "
                        "(gains in points, 95% bootstrap intervals; across seeds: mean, sd, t interval)")
    for col in ("model", "seed", "status", "test gain", "95% CI", "heldout gain", "95% CI ", "train s"):
        table.add_column(col, justify="left" if col in ("model", "status") else "right")
    for run in summary["runs"]:
        g = run.get("gains") or {}
        t, h = (Gain.from_dict(g[s]) if g.get(s) else None for s in ("test", "heldout"))
        table.add_row(f"{run['model']} ({run['kind']})", str(run["seed"]),
                      run["status"] + (f": {run['reason'][:60]}" if run.get("reason") else ""),
                      _pts(t.abs) if t else "-", _ci(t.ci) if t else "-",
                      _pts(h.abs) if h else "-", _ci(h.ci) if h else "-",
                      f"{run['train_seconds']:.0f}" if run.get("train_seconds") is not None else "-")
    for split in ("test", "heldout"):
        agg = summary["seeds"].get(split)
        if agg:
            spread = "-" if agg["sd"] is None else f"sd {100 * agg['sd']:.1f}"
            table.add_row(f"[bold]across {agg['n']} seeds[/]", "", spread,
                          *([_pts(agg["mean"]), _ci([agg["ci_low"], agg["ci_high"]]), "", ""] if split == "test"
                            else ["", "", _pts(agg["mean"]), _ci([agg["ci_low"], agg["ci_high"]])]), "")
    return table


@app.command("report")
def report_cmd(
    cell_dir: Path = typer.Argument(..., help="a cell folder"),
    output: Optional[Path] = typer.Option(None, "--out", help="Folder for report.html and report.json (default: the cell)."),
) -> None:
    """The run report of one cell: timeline, training curves, submissions, code revisions and the
    RL methods in the agent's code, failures and recoveries, budget; HTML and a JSON twin."""
    from rlbench.reports.cell_html import write_cell_report

    try:
        html, js = write_cell_report(cell_dir, output)
    except ConfigError as exc:
        _fail(exc)
    out.print(f"report: {html}\njson: {js}", highlight=False)


@app.command("leaderboard")
def leaderboard_cmd(
    suite_dir: Path = typer.Argument(..., help="a suite folder (results/suites/NAME)"),
    output: Optional[Path] = typer.Option(None, "--out", help="Folder for leaderboard.{html,csv,json} (default: the suite)."),
) -> None:
    """Agents x tasks: score, gain and 95% interval, normalized score, significance; HTML (sortable,
    filterable, plots), CSV and JSON, and the table here."""
    from rlbench.reports.leaderboard import leaderboard_rows, terminal_table, write_leaderboard

    try:
        paths = write_leaderboard(suite_dir, output)
        rows, _ = leaderboard_rows(suite_dir)
    except ConfigError as exc:
        _fail(exc)
    out.print(terminal_table(rows, Path(suite_dir).name))
    out.print("\n".join(f"{k}: {v}" for k, v in paths.items()), highlight=False)


@app.command("robustness")
def robustness_cmd(
    cell_dir: Path = typer.Argument(..., help="a cell folder (results/suites/NAME/cells/KEY or results/cells/ID)"),
    overrides: Optional[List[str]] = OverridesArg,
    quiet: bool = QuietOpt,
) -> None:
    """Rerun a cell's chosen recipe from the base model across seeds and on the task's second model
    size, graded by the harness: `rlbench robustness CELL_DIR seeds=5` (also scale=false, budget_s=)."""
    from rlbench.config.core import load_config
    from rlbench.robustness.rerun import RobustnessConfig, run_robustness
    from rlbench.sandbox import SandboxUnavailable

    set_quiet(quiet)
    try:
        cfg = load_config(RobustnessConfig, overrides=overrides or [], source_name="rlbench robustness")
        summary = run_robustness(cell_dir, cfg)
    except (ConfigError, SandboxUnavailable) as exc:
        _fail(exc)
    out.print(_robustness_table(summary))
    scale = summary.get("scale")
    if scale:
        verdict = "holds" if scale["holds"] else "does not hold"
        out.print(f"scalability: the gain {verdict} on {scale['model']} (test gain interval above zero: "
                  f"{'yes' if scale['holds'] else 'no'})", highlight=False)
    out.print(f"written: {Path(cell_dir) / 'robustness' / 'summary.json'}", highlight=False)


@app.command("run")
def run_cmd(
    overrides: Optional[List[str]] = OverridesArg,
    config: Optional[Path] = typer.Option(None, "--config", help="A suite YAML (ray_configs/suite-arith.yaml)."),
    quiet: bool = QuietOpt,
) -> None:
    """Run benchmark cells as a suite on Ray: `rlbench run agent=reference task=arith-grpo seed=0`
    (one cell), `"agents=[null,reference]" "seeds=[0,1,2]"` (every combination, in parallel as far
    as `cell_cpus` allows), `resume=SUITE_DIR` (finish a suite that was stopped). `sandbox=none`
    runs without bubblewrap and marks the results unsandboxed."""
    from rlbench.orchestration.suite import load_run_spec, run_suite
    from rlbench.sandbox import SandboxUnavailable

    set_quiet(quiet)
    try:  # run_suite checks every task, agent and base model before any work (exit 2 on a bad one)
        spec = load_run_spec(overrides or [], str(config) if config else None)
        suite_dir, results = run_suite(spec)
    except (ConfigError, SandboxUnavailable) as exc:
        _fail(exc)
    from rlbench.io import read_json

    for r in results:
        # a reason is the harness's or an exception's text: printed as it is, never read as rich markup
        out.print(f"{r.cell}: {r.status}" + (f" ({r.reason})" if r.reason else ""), highlight=False, markup=False)
    out.print(_cells_table(read_json(suite_dir / "scores.json")["cells"]))
    for r in results:
        if r.robustness:
            out.print(_robustness_table(r.robustness))
    if (suite_dir / "leaderboard.html").is_file():
        out.print(f"leaderboard: {suite_dir / 'leaderboard.html'} (and .csv, .json)", highlight=False)
        for r in results:
            if r.cell_dir and (Path(r.cell_dir) / "report.html").is_file():
                out.print(f"report: {Path(r.cell_dir) / 'report.html'}", highlight=False)
    out.print(f"suite: {suite_dir} (results.json, scores.json, scores.csv; resume with resume={suite_dir})",
              highlight=False)
    if harness_crashed(results):
        raise typer.Exit(1)


@app.command("export")
def export_cmd(
    cell_dir: Path = typer.Argument(..., help="a cell folder (results/cells/ID or results/suites/NAME/cells/KEY)"),
    fmt: str = typer.Option("inspect", "--format", help="inspect: an Inspect AI eval log (`inspect view` opens it); "
                            "atif is refused (Harbor's reader needs Python >= 3.12)."),
    output: Optional[Path] = typer.Option(None, "--out", help="A .eval or .json file, or a folder for CELL.eval "
                                          "(default: CELL_DIR/inspect/CELL.eval)."),
) -> None:
    """The cell's trajectory as a log an existing viewer opens: the task description, the agent's
    messages and tool calls, the harness's test and heldout scores and gains, the model's tokens
    and cost. Open it with `inspect view --log-dir FOLDER` (pip install inspect_ai)."""
    try:
        from rlbench.reports.export import export_cell

        path = export_cell(cell_dir, fmt, output)
    except ImportError as exc:
        err.print(f"[bold red]error:[/] {escape(str(exc))}; install the viewer's package: pip install inspect_ai",
                  highlight=False)
        raise typer.Exit(code=2)
    except (ValueError, OSError) as exc:  # ExportError is a ValueError
        err.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False)
        raise typer.Exit(code=2)
    out.print(f"exported: {path}\nview: inspect view --log-dir {path.parent}", highlight=False, markup=False)


def harness_crashed(results: Sequence[CellResult]) -> list[str]:
    """The cells the harness crashed (crash_by "harness", not the agent): `rlbench run` exits 1 on
    any, since their numbers say nothing about the agent (a resumed suite reruns them)."""
    return [r.cell for r in results if r.harness_crash]


def main() -> None:
    try:
        app()
    except ConfigError as exc:  # anything that escaped a command
        err.print(f"[bold red]error:[/] {exc}", highlight=False)
        sys.exit(2)


if __name__ == "__main__":
    main()
