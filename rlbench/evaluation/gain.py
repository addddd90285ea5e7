"""Score a trained checkpoint against a reference model on the hidden splits.

Gains are paired: the same prompts under the same protocol for both models, so the paired
bootstrap over prompts (rlbench/scoring/bootstrap.py) gives a much tighter interval than the two
separate intervals suggest. The reference is the task's base model, or any other scored model
(the M base in the robustness stage, a task's baseline configuration).

The greedy gain is paired the same way, beside the sampled one: a checkpoint that only sharpens its
sampling distribution (a scaled final norm is a lower temperature) raises the sampled score with
no greedy gain, and `sampling_only_gain` flags that.
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from rlbench.evaluation.baseline import BASELINE_SPLITS, evaluate_model
from rlbench.results import Gain
from rlbench.scoring.bootstrap import paired_bootstrap
from rlbench.tasks.spec import TaskConfig

GAIN_SPLITS = ("test", "heldout")


def paired_gains(reference: dict[str, Any], new: dict[str, Any], splits: Sequence[str] = BASELINE_SPLITS) -> dict[str, Any]:
    """Per split: both scores, greedy figures, absolute and relative gain with bootstrap intervals."""
    out = {}
    for split in splits:
        b, s = reference["scores"][split], new["scores"][split]
        g = paired_bootstrap(b["per_item"], s["per_item"])
        out[split] = {
            "base": b["pass_at_1"], "score": s["pass_at_1"], "base_greedy": b.get("greedy"), "greedy": s.get("greedy"),
            "abs_gain": g.abs_gain, "gain_ci_low": g.ci_low, "gain_ci_high": g.ci_high,
            "rel_gain_pct": g.rel_gain_pct, "rel_ci_low": g.rel_ci_low, "rel_ci_high": g.rel_ci_high,
            "significant": g.significant, "n": g.n, **win_rate(b["per_item"], s["per_item"]),
            "greedy_gain": greedy.core_dict() if (greedy := _greedy_gain(b, s)) is not None else None,
        }
        if s.get("detail") is not None:  # what the reward reports beside its mean, for both models
            out[split].update(base_detail=b.get("detail"), detail=s["detail"])
    return out


def _greedy_gain(b: dict[str, Any], s: dict[str, Any]) -> Gain | None:
    """The paired greedy gain with its bootstrap interval; None when either side lacks per-item
    greedy scores (results from before they were kept)."""
    gb, gs = b.get("greedy_per_item") or [], s.get("greedy_per_item") or []
    if not gb or len(gb) != len(gs):
        return None
    g = paired_bootstrap(gb, gs)
    return Gain(abs=g.abs_gain, ci_low=g.ci_low, ci_high=g.ci_high, significant=g.significant)


def win_rate(base: Sequence[float], new: Sequence[float]) -> dict[str, float]:
    """Share of prompts where the new model's score beats the reference's (ties count half), with
    a 95% interval over prompts: the preference-style reading of the same paired scores."""
    from rlbench.evaluation.stats import mean_ci

    outcome = [1.0 if s > b + 1e-9 else 0.0 if s < b - 1e-9 else 0.5 for b, s in zip(base, new)]
    mean, lo, hi = mean_ci(outcome)
    return {"win_rate": mean, "win_ci_low": lo, "win_ci_high": hi}


def split_gain(v: dict[str, Any]) -> Gain:
    """A split of paired_gains as results keep it (cells, robustness reruns, an optimize task's
    baseline configuration): the bootstrap intervals of the absolute and the relative gain,
    whether it is distinguishable from zero, the win rate and the greedy gain."""
    greedy = v.get("greedy_gain")
    return Gain(abs=v["abs_gain"], ci_low=v["gain_ci_low"], ci_high=v["gain_ci_high"], significant=v["significant"],
                rel_pct=v["rel_gain_pct"], rel_ci_low=v["rel_ci_low"], rel_ci_high=v["rel_ci_high"],
                win_rate=v.get("win_rate"), greedy=Gain.from_dict(greedy) if greedy is not None else None)


def result_gain(v: dict[str, Any]) -> dict[str, Any]:
    """split_gain as the JSON dict records hold (Gain.to_dict)."""
    return split_gain(v).to_dict()


def sampling_only_gain(gains: Mapping[str, Gain | Mapping[str, Any]], split: str = "test") -> dict[str, Any]:
    """{"flag": bool, "reason": str}: flagged when the sampled gain on `split` is significantly
    above zero and the greedy gain is not (its interval reaches 0 or below). Sharper sampling
    (temperature, min_p, a scaled final norm) moves the sampled score alone; RL that learned
    something moves the greedy answer too. The score stands beside the flag."""
    g = Gain.coerce(gains[split]) if gains.get(split) else None
    if g is None or not (g.significant and g.abs > 0):
        return {"flag": False, "reason": f"no significant sampled {split} gain"}
    greedy = g.greedy
    if greedy is None:
        return {"flag": False, "reason": f"no paired greedy {split} figures to compare"}
    sampled = f"{100 * g.abs:+.1f} points [{100 * g.ci_low:+.1f}, {100 * g.ci_high:+.1f}]"
    greedy_txt = f"{100 * greedy.abs:+.1f} points [{100 * greedy.ci_low:+.1f}, {100 * greedy.ci_high:+.1f}]"
    if greedy.ci_low > 0:
        return {"flag": False, "reason": f"the greedy {split} gain {greedy_txt} is significant too"}
    return {"flag": True, "reason": f"the sampled {split} gain {sampled} is significant but the greedy gain "
                                    f"{greedy_txt} is not: a gain from sharper sampling (temperature, min_p, a "
                                    "scaled final norm), not from RL"}


def score_against_base(checkpoint: str, task: TaskConfig, device: str = "cpu", base_model: str | None = None,
                       engine: str = "auto") -> dict[str, Any]:
    """`base_model`: another reference than the task's base (e.g. its `scale` model). Both are
    scored by one engine: a gain pairs draws of the same sampler."""
    ref = base_model or task.model.base
    base = evaluate_model(ref, task, BASELINE_SPLITS, device=device, engine=engine)
    new = evaluate_model(checkpoint, task, BASELINE_SPLITS, device=device, engine=engine)
    return {"task": task.name, "checkpoint": checkpoint, "base_model": ref, "engine": new["engine"],
            "splits": paired_gains(base, new)}
