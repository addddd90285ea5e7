"""Progress bars for long work, silent when asked (`RLBENCH_QUIET=1` or `--quiet`)."""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

console = Console(stderr=True)


def quiet() -> bool:
    return os.environ.get("RLBENCH_QUIET", "") not in ("", "0", "false")


def set_quiet(value: bool) -> None:
    if value:
        os.environ["RLBENCH_QUIET"] = "1"


class _Task:
    """One bar. Off a terminal (logs, CI) it prints a plain line at every tenth of the work."""

    def __init__(self, progress: Progress | None, task_id: int | None, label: str,
                 total: float | None = None, lines: bool = False):
        self._p, self._id, self._label = progress, task_id, label
        self._total, self._lines, self._done, self._next_tenth = total, lines, 0.0, 1
        self._fields = ""

    def advance(self, n: float = 1) -> None:
        self._done += n
        if self._p is not None:
            self._p.advance(self._id, n)
        elif self._lines and self._total:
            while self._next_tenth <= 10 and self._done >= self._total * self._next_tenth / 10:
                console.print(f"{self._label}: {self._next_tenth * 10}% "
                              f"({int(self._done)}/{int(self._total)}){self._fields}", highlight=False)
                self._next_tenth += 1

    def update(self, **fields) -> None:
        self._fields = "".join(f" {k}={v}" for k, v in fields.items())
        if self._p is not None:
            desc = self._label
            if fields:
                desc += " " + " ".join(f"{k}={v}" for k, v in fields.items())
            self._p.update(self._id, description=desc)


@contextmanager
def track(label: str, total: float | None) -> Iterator[_Task]:
    """A rich progress bar with elapsed and remaining time; silent in quiet mode."""
    if quiet():
        yield _Task(None, None, label)
        return
    if not console.is_terminal:
        yield _Task(None, None, label, total=total, lines=True)
        return
    with Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
        TimeElapsedColumn(), TimeRemainingColumn(), console=console, transient=False,
    ) as progress:
        task_id = progress.add_task(label, total=total)
        yield _Task(progress, task_id, label)


def info(msg: str) -> None:
    if not quiet():
        console.print(msg)


@contextmanager
def timed(stages: dict[str, float], name: str) -> Iterator[None]:
    """Add the block's wall seconds to `stages[name]` (even when it raises): where a cell's time
    goes, recorded in its result (`harness_seconds`) and read by scripts/bench_overhead.py."""
    import time

    t0 = time.monotonic()
    try:
        yield
    finally:
        stages[name] = round(stages.get(name, 0.0) + time.monotonic() - t0, 3)
