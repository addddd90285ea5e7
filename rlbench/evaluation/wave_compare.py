"""Are a task's test waves interchangeable? Score models on several waves and compare.

A wave is only a fresh test if it is as hard as the old one: same generator, same parameters, a
different secret seed. That is a claim about the task, so it is measured, not assumed: each model
(the base and, say, a reference checkpoint: a trained model can be hit harder by a shifted draw
than the base) is scored on every wave with the task's own protocol, and each wave is compared
with the first. The waves' splits are independent draws, so the 95% interval of a difference is
the two intervals' half-widths combined in quadrature; a wave "agrees" when the difference lies
within it. `standard` names the task's own test and heldout; `public` and `secret` name them as
drawn from the task file's seed and from this installation's secret (RLBENCH_SPLIT_SEED), so
`--waves public,secret` checks that a secret draw is the same task as the public one the README
and the tests measure.
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

from rlbench.config.core import ConfigError
from rlbench.tasks.spec import TaskConfig

STANDARD = "standard"
SEEDED = ("public", "secret")  # the standard splits from a chosen seed source


@contextlib.contextmanager
def using_seed_source(wave: str) -> Iterator[None]:
    """RLBENCH_SPLIT_SEED set to `wave` while it is scored, when `wave` is `public` or `secret`."""
    from rlbench.data.splits import SPLIT_SEED_ENV

    if wave not in SEEDED:
        yield
        return
    before = os.environ.get(SPLIT_SEED_ENV)
    os.environ[SPLIT_SEED_ENV] = wave
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(SPLIT_SEED_ENV, None)
        else:
            os.environ[SPLIT_SEED_ENV] = before


def _on_wave(task: TaskConfig, wave: str) -> TaskConfig:
    from rlbench.tasks.spec import check_wave_name

    waved = copy.deepcopy(task)
    waved.data.wave = "" if wave in (STANDARD, *SEEDED) else wave
    if waved.data.wave:
        check_wave_name(waved.data.wave)
    return waved


def wave_difference(first: dict[str, Any], other: dict[str, Any]) -> tuple[float, float]:
    """`other`'s pass@1 minus `first`'s and the 95% half-width of that difference: two independent
    draws, so their intervals' half-widths combine in quadrature. Each is a split's score
    (`pass_at_1`, `ci_low`, `ci_high`), measured now or read from a recorded baseline."""
    half = math.hypot((first["ci_high"] - first["ci_low"]) / 2, (other["ci_high"] - other["ci_low"]) / 2)
    return other["pass_at_1"] - first["pass_at_1"], half


def compare_waves(task: TaskConfig, models: Sequence[str], waves: Sequence[str],
                  splits: Sequence[str] = ("test", "heldout"), device: str = "cpu") -> dict[str, Any]:
    """Each model on each wave (cached like any harness score), and each wave against the first."""
    from rlbench.evaluation.baseline import evaluate_model

    if len(waves) < 2 or len(set(waves)) != len(waves):
        raise ConfigError(f"key 'waves': value {list(waves)} is not allowed; allowed: two or more distinct wave names")
    if not models:
        raise ConfigError("key 'models': value [] is not allowed; allowed: one or more model references")
    rows: list[dict[str, Any]] = []
    for model in models:
        scores = {}
        for w in waves:
            with using_seed_source(w):
                scores[w] = evaluate_model(model, _on_wave(task, w), tuple(splits), device=device)["scores"]
        for split in splits:
            first = scores[waves[0]][split]
            for w in waves[1:]:
                s = scores[w][split]
                diff, half = wave_difference(first, s)
                rows.append({"model": model, "split": split, "wave": w, "against": waves[0],
                             "score": s["pass_at_1"], "ci": [s["ci_low"], s["ci_high"]],
                             "against_score": first["pass_at_1"], "against_ci": [first["ci_low"], first["ci_high"]],
                             "diff": round(diff, 4), "diff_halfwidth": round(half, 4), "agree": abs(diff) <= half})
    return {"task": task.name, "version": task.version, "waves": list(waves), "models": list(models),
            "splits": list(splits), "rows": rows, "agree": all(r["agree"] for r in rows)}
