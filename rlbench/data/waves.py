"""Fresh test waves: test and heldout splits drawn again from a secret per-wave seed.

A fixed test split leaks over time (agents, authors and papers see it). A wave is a named redraw of
a procedural task's hidden splits: the same generator and parameters, so the same difficulty, from
a seed that is a secret kept under the hidden root (`waves/NAME.secret`, created on first use),
outside every workspace and never written to a task file. Train and dev are the task's own, so an
agent's workspace does not change with the wave; wave prompts are drawn disjoint from all four of
the task's standard splits, so a wave is also fresh against anything trained on the old test.
`rlbench run wave=NAME` scores a cell on it.
"""

from __future__ import annotations

import os
import random
import re
import secrets
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError
from rlbench.data.generators import resolve_generator
from rlbench.data.splits import draw_distinct
from rlbench.paths import hidden_root
from rlbench.tasks.spec import DataSource, TaskConfig

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_-]{0,63}$")
_FAMILY = {"test": "main", "heldout": "heldout"}


def check_wave_name(name: str) -> None:
    if not NAME.match(name):
        raise ConfigError(f"key 'wave': value '{name}' is not a wave name (letters, digits, '_' and '-', at most 64)")


def wave_secret(name: str) -> str:
    """The wave's secret seed; made once, then read (file mode 600 under the hidden root)."""
    check_wave_name(name)
    path = hidden_root() / "waves" / f"{name}.secret"
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        tmp.write_text(secrets.token_hex(16))
        os.chmod(tmp, 0o600)
        try:
            os.link(tmp, path)  # never replace a secret another process made first
        except FileExistsError:
            pass
        finally:
            tmp.unlink()
    return path.read_text().strip()


def draw_wave(task: TaskConfig, standard: dict[str, list[dict[str, Any]]], name: str,
              task_folder: Path | None = None) -> dict[str, list[dict[str, Any]]]:
    """The wave's test and heldout, with the standard splits' sizes, none of their prompts."""
    if task.data.source != DataSource.generator:
        raise ConfigError(f"task {task.name}: test waves need a procedural task (data.source generator); "
                          f"this one reads fixed data ({task.data.source.value})")
    gen = resolve_generator(task.data.generator, task_folder)
    secret = wave_secret(name)
    seen = {it["prompt"] for items in standard.values() for it in items}
    out: dict[str, list[dict[str, Any]]] = {}
    for split in ("test", "heldout"):
        out[split] = draw_distinct(gen, _FAMILY[split], random.Random(f"{secret}:{task.name}:{split}"),
                                   len(standard[split]), task.data.params, seen, f"{split}-{name}",
                                   f"task {task.name}: wave '{name}' {split} is not reachable (the task is too small "
                                   "for waves)")
    return out
