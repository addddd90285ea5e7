"""SamplingParams: every setting of one generation call, as one validated value.

Why one object: the same settings (n, temperature, top_p, max_new_tokens, seed, greedy, the tool
loop's tool and max_calls, extra stop tokens) travel from a pipeline's or the harness's config
through `Rollout.generate`, `RolloutEngine.generate` (maybe a Ray actor) to
`hf_generate.generate` or vLLM. Passed as separate keywords, the copies drifted: some callers
dropped `top_p` or the task's tool arguments, and the backend then used its default without a
word. One frozen value, checked once where it is made, travels whole (as vLLM's own
`SamplingParams` does) and pickles to an actor as it is. A backend maps it onto its own settings.

This module sits in the engines' lowest layer: it imports nothing above `rlbench.config`.
"""

from __future__ import annotations

from dataclasses import dataclass

from rlbench.config.core import ConfigError


@dataclass(frozen=True)
class SamplingParams:
    """`n` completions per prompt at `temperature` and `top_p`, each at most `max_new_tokens`
    tokens, seeded per item by `seed` (rlbench/engines/hf_generate.row_seed). `greedy` ignores
    temperature, top_p and n (one completion each). `tool`: the rlbench/envs tool the model may
    call, up to `max_calls` times ("" for none). `stop_ids`: more tokens that end a completion
    (kept in it, unlike end-of-sequence)."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    max_new_tokens: int = 16
    seed: int = 0
    greedy: bool = False
    tool: str = ""
    max_calls: int = 2
    stop_ids: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        # a list given for stop_ids is kept as a tuple: the value stays hashable and immutable
        object.__setattr__(self, "stop_ids", tuple(int(s) for s in self.stop_ids))
        for name, ok, allowed in (
            ("n", self.n >= 1, ">= 1"),
            ("temperature", self.temperature > 0, "> 0 (greedy=true for argmax decoding)"),
            ("top_p", 0 < self.top_p <= 1, "in (0, 1]"),
            ("max_new_tokens", self.max_new_tokens >= 1, ">= 1"),
            ("max_calls", self.max_calls >= 0, ">= 0"),
        ):
            if not ok:
                value = getattr(self, name)
                raise ConfigError(f"sampling '{name}': value '{value}' is not allowed; allowed: {allowed}")

    @property
    def per_prompt(self) -> int:
        """Completions each prompt gets: one when greedy, else `n`."""
        return 1 if self.greedy else self.n
