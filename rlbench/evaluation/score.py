"""Score a model on task splits with the task's evaluation protocol.

Sampled pass@1 and greedy accuracy, per prompt both: a gain in the sampled score alone can come
from sharper sampling (a checkpoint that lowers its own temperature), not from training, so the
hidden splits always get the greedy figure too and gains are paired on each (rlbench/evaluation/gain.py).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, Sequence

from rlbench.engines.sampling import SamplingParams
from rlbench.envs import tool_args
from rlbench.evaluation.engine import ScoringModel
from rlbench.evaluation.stats import mean_ci, wilson_ci
from rlbench.progress import track
from rlbench.rewards import reward_breakdown, score_many
from rlbench.tasks.spec import HIDDEN_SPLITS, EvalProtocol, TaskConfig

# The harness's evaluation semantics: part of every score cache key. Bump it whenever a change can
# move a score. 2: generation settings come from the protocol alone (a checkpoint's
# generation_config.json is ignored), greedy per item on the hidden splits. 3: sampling seeded per
# item (rlbench/engines/hf_generate.py), not per batch. The scoring engine (hf or vllm,
# rlbench/evaluation/engine.py) is a key of its own beside it: a vLLM score is another number.
EVAL_VERSION = 3


@dataclass
class SplitScore:
    split: str
    n: int
    samples_per_prompt: int
    pass_at_1: float
    ci_low: float
    ci_high: float
    greedy: float | None = None
    greedy_ci_low: float | None = None
    greedy_ci_high: float | None = None
    ci_ok: bool = True  # the interval is within the protocol's max half-width
    # what the reward reports beside its mean, on the sampled and the greedy completions
    # (rlbench/rewards/__init__.py reward_breakdown; e.g. honest_int's calibration), else None
    detail: dict[str, Any] | None = None
    per_item: list[float] = field(default_factory=list)  # per-prompt pass@1, for paired tests
    greedy_per_item: list[float] = field(default_factory=list)  # per-prompt greedy reward, for paired tests

    @property
    def halfwidth(self) -> float:
        return (self.ci_high - self.ci_low) / 2

    def summary(self) -> dict[str, Any]:
        d = asdict(self)
        d.pop("per_item")
        d.pop("greedy_per_item")
        if d["detail"] is None:
            d.pop("detail")
        d["halfwidth"] = round(self.halfwidth, 4)
        return d


def score_split(
    scorer: ScoringModel,
    items: Sequence[dict[str, Any]],
    split: str,
    task: TaskConfig,
    protocol: EvalProtocol | None = None,
) -> SplitScore:
    """pass@1 = mean over prompts of (correct samples / k) at the protocol's temperature, and
    greedy accuracy as a second figure; both with 95% intervals over prompts. Greedy is computed
    when the protocol asks for it and always on the hidden splits. `scorer` says which engine
    samples (rlbench/evaluation/engine.py)."""
    proto = protocol or task.eval
    params = dict(task.reward.params)
    prompts = [it["prompt"] for it in items]
    tool = tool_args(task)
    batch = max(1, proto.batch_size // proto.samples_per_prompt)
    n_batches = -(-len(prompts) // batch)
    with_greedy = proto.greedy or split in HIDDEN_SPLITS
    with track(f"eval {split} {'sampled and greedy' if with_greedy else 'sampled'}", n_batches) as bar:
        sampling = SamplingParams(n=proto.samples_per_prompt, temperature=proto.temperature, top_p=proto.top_p,
                                  max_new_tokens=proto.max_new_tokens, seed=proto.seed, **tool)
        advance = lambda n: bar.advance(-(-n // batch))  # noqa: E731
        if with_greedy:
            sampled, greedy = scorer.sample_and_greedy(prompts, sampling, batch, proto.batch_size, on_batch=advance)
        else:
            sampled = scorer.generate(prompts, sampling, batch, on_batch=advance)
    texts = [c.text for comps in sampled for c in comps]
    answers = [it["answer"] for comps, it in zip(sampled, items) for _ in comps]
    flat = score_many(task.reward.name, params, texts, answers)
    sampled_detail = reward_breakdown(task.reward.name, params, [it["prompt"] for comps, it in zip(sampled, items) for _ in comps],
                                      texts, answers)
    per_item, at = [], 0
    for comps in sampled:
        per_item.append(sum(flat[at:at + len(comps)]) / len(comps))
        at += len(comps)
    mean, lo, hi = mean_ci(per_item)
    score = SplitScore(split, len(items), proto.samples_per_prompt, mean, lo, hi, per_item=per_item)
    if sampled_detail is not None:
        score.detail = {"sampled": sampled_detail}
    if with_greedy:
        score.greedy_per_item = score_many(task.reward.name, params, [c.text for c in greedy],
                                           [it["answer"] for it in items])
        score.greedy, score.greedy_ci_low, score.greedy_ci_high = wilson_ci(sum(score.greedy_per_item), len(items))
        if score.detail is not None:
            score.detail["greedy"] = reward_breakdown(task.reward.name, params, prompts, [c.text for c in greedy],
                                                      [it["answer"] for it in items])
    score.ci_ok = score.halfwidth <= proto.max_ci_halfwidth + 1e-12
    return score
