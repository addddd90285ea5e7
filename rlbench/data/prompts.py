"""A task's questions rendered into the prompts its model is given (the task's `prompt` section).

Real models are asked through a template or their chat template, often after a few worked
examples. If each reader formatted prompts itself (the harness's evaluation, the SDK, every
pipeline an agent writes), two of them would soon differ, and a checkpoint would be scored on
prompts it was never trained on. So the rendering happens once, here, when the splits are built:
the stored item's `prompt` is what the model sees, `question` keeps the text it came from, and
every reader gets the same prompt from the same file.

A chat template is the base model's own (its tokenizer's `chat_template`, applied by
transformers with the generation prompt added), so the task's prompts are fixed by the pinned
base, whatever checkpoint is later scored on them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError
from rlbench.tasks.spec import PromptConfig

Items = list[dict[str, Any]]


class ChatTemplate:
    """The base model's chat template, through transformers' own `apply_chat_template`."""

    def __init__(self, tokenizer_dir: Path):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        if not getattr(self.tokenizer, "chat_template", None):
            raise ConfigError(f"key 'prompt.chat': the base model's tokenizer at {tokenizer_dir} has no chat template")

    @property
    def digest(self) -> str:
        """Which template (recorded with the splits)."""
        return hashlib.sha256(str(self.tokenizer.chat_template).encode()).hexdigest()[:16]

    def render(self, messages: list[dict[str, str]]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)


def few_shot_examples(cfg: PromptConfig, train: Items) -> tuple[Items, Items]:
    """(the worked examples, the train split without them): the first `few_shot` train items, taken
    out of train so no question is both an example and a training prompt."""
    if cfg.few_shot > len(train) // 2:
        raise ConfigError(f"key 'prompt.few_shot': value '{cfg.few_shot}' leaves too little of the {len(train)} "
                          "train items")
    return train[:cfg.few_shot], train[cfg.few_shot:]


def _worked(example: dict[str, Any]) -> str:
    """An example's answer as shown: its whole worked solution where the data keeps one."""
    return str(example.get("solution") or example["answer"])


def render_prompt(cfg: PromptConfig, question: str, examples: Items, chat: ChatTemplate | None) -> str:
    """One question as the model is given it."""
    ask = cfg.template.format(prompt=question) if cfg.template else question
    if cfg.chat:
        if chat is None:
            raise ConfigError("key 'prompt.chat': rendering a chat prompt needs the base model's tokenizer")
        messages = [{"role": "system", "content": cfg.system}] if cfg.system else []
        for ex in examples:
            shown = cfg.template.format(prompt=ex["prompt"]) if cfg.template else ex["prompt"]
            messages += [{"role": "user", "content": shown}, {"role": "assistant", "content": _worked(ex)}]
        return chat.render(messages + [{"role": "user", "content": ask}])
    shots = "".join(f"{cfg.template.format(prompt=ex['prompt']) if cfg.template else ex['prompt']} {_worked(ex)}\n\n"
                    for ex in examples)
    return shots + ask


def render_splits(cfg: PromptConfig, splits: dict[str, Items], tokenizer_dir: Path | None) -> dict[str, Items]:
    """Every split's items with `prompt` rendered and the raw text kept as `question`; the worked
    examples leave train. Splits without a prompt config come back as they are."""
    if not cfg.active:
        return splits
    if cfg.chat and tokenizer_dir is None:
        raise ConfigError("key 'prompt.chat': the task's splits need the base model's tokenizer to be built")
    chat = ChatTemplate(tokenizer_dir) if cfg.chat and tokenizer_dir is not None else None
    examples, train = few_shot_examples(cfg, splits["train"])
    out = {}
    for split, items in {**splits, "train": train}.items():
        out[split] = [{**item, "question": item["prompt"], "prompt": render_prompt(cfg, item["prompt"], examples, chat)}
                      for item in items]
    return out


def prompt_key(cfg: PromptConfig, base: str) -> dict[str, Any]:
    """What of the prompt config changes the stored splits: the config, and with chat the base
    model it takes its template from (a canonical base is pinned by hash, a hub base by revision)."""
    if not cfg.active:
        return {}
    return {"template": cfg.template, "system": cfg.system, "chat": cfg.chat, "few_shot": cfg.few_shot,
            **({"chat_base": base} if cfg.chat else {})}
