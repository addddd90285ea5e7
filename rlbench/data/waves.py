"""Fresh test waves: test and heldout splits drawn again from a secret per-wave seed.

A fixed test split leaks over time (agents, authors and papers see it). A wave is a named redraw of
a procedural task's hidden splits: the same generator and parameters, so the same difficulty, from
a seed that is a secret kept under the hidden root (`waves/NAME.secret`, created on first use),
outside every workspace and never written to a task file. Train and dev are the task's own, so an
agent's workspace does not change with the wave. Wave prompts are never train or dev prompts, and
are drawn apart from the standard test and heldout as well, so a wave is fresh against anything
tuned on the old test; a generator whose prompt space is too small for that (arith-grpo's main
family has 5,050 distinct prompts, 4,700 of them in its standard splits) tops the wave up
from the standard hidden prompts, and `wave_overlap` reports the share in each cell's result.
`rlbench run wave=NAME` scores a cell on it.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError
from rlbench.data.generators import draw_distinct, resolve_generator, split_family
from rlbench.paths import hidden_root, stored_secret
from rlbench.progress import info
from rlbench.tasks.spec import DataSource, TaskConfig, check_wave_name


def wave_secret(name: str) -> str:
    """The wave's secret seed; made once, then read (file mode 600 under the hidden root)."""
    check_wave_name(name)
    return stored_secret(hidden_root() / "waves" / f"{name}.secret")


def draw_wave(task: TaskConfig, standard: dict[str, list[dict[str, Any]]], name: str,
              task_folder: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """The wave's test and heldout, with the standard splits' sizes. Never a train or dev prompt;
    the standard test and heldout prompts only where the generator has too few others (a small
    prompt space), and then `wave_overlap` says how many."""
    if task.data.source != DataSource.generator:
        raise ConfigError(f"task {task.name}: test waves need a procedural task (data.source generator); "
                          f"this one reads fixed data ({task.data.source.value})")
    gen = resolve_generator(task.data.generator, task_folder)
    secret = wave_secret(name)
    visible = {it["prompt"] for s in ("train", "dev") for it in standard[s]}
    seen = visible | {it["prompt"] for s in ("test", "heldout") for it in standard[s]}
    out: dict[str, list[dict[str, Any]]] = {}
    for split in ("test", "heldout"):
        rng = random.Random(f"{secret}:{task.name}:{split}")
        want, prefix = len(standard[split]), f"{split}-{name}"
        items = draw_distinct(gen, split_family(gen, split), rng, want, task.data.params, seen, prefix, "")
        if len(items) < want:  # the generator's space is nearly used up: the old hidden prompts may return
            fresh = len(items)
            again = visible | {it["prompt"] for it in items} | {it["prompt"] for it in out.get("test", [])}
            items = draw_distinct(gen, split_family(gen, split), rng, want, task.data.params, again, prefix,
                                  f"task {task.name}: wave '{name}' {split} is not reachable even with the standard "
                                  "hidden prompts (the generator's space is too small)", items)
            info(f"[yellow]wave[/] {name}: {task.name} {split} has {fresh} prompts new to every split; "
                 f"the other {want - fresh} are from the standard hidden splits (see wave_overlap)")
        out[split] = items
    return out
