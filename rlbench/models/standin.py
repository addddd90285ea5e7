"""Local stand-ins for the hub models of the real tier, in their exact format.

The real tasks name hub models (Qwen2.5-0.5B and the like) that cannot be fetched here. Their
code paths (a byte-level BPE tokenizer with special tokens, a chat template in
tokenizer_config.json, a Qwen2 architecture with tied embeddings, safetensors weights) are tested
against a folder built the same way at a size a CPU runs in seconds: the same files
`save_pretrained` writes for the real model, so the code that loads one loads the other.
"""

from __future__ import annotations

from pathlib import Path

# Qwen2's ChatML template (as in Qwen2.5's tokenizer_config.json, without its tool-calling branch)
CHATML_TEMPLATE = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}{%- endif %}"
    "{%- for message in messages %}"
    "{%- if not (message.role == 'system' and loop.first) %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CORPUS = ["Question: Natalia sold clips to 48 of her friends in April, and then she sold half as many clips in May.",
          "How many clips did Natalia sell altogether in April and May? 48/2 = <<48/2=24>>24 #### 72",
          "The answer is 1,234.50. Let me think step by step: 3 + 4 = 7, so 7 * 2 = 14.",
          "def add(a, b):\n    return a + b\nassert add(2, 3) == 5\n",
          "You are a helpful assistant. Solve the problem and give the final answer after ####."]


def build_chat_standin(folder: Path, *, vocab_size: int = 512, hidden: int = 64, layers: int = 2,
                       seed: int = 0, max_positions: int = 1024) -> Path:
    """A randomly initialised Qwen2 causal LM with a byte-level BPE tokenizer and the ChatML chat
    template, saved by `save_pretrained` as a hub model's folder is (config.json,
    generation_config.json, model.safetensors, tokenizer.json, tokenizer_config.json and the chat
    template, which transformers 5 writes to chat_template.jinja)."""
    import torch
    from tokenizers import ByteLevelBPETokenizer
    from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(CORPUS * 4, vocab_size=vocab_size, min_frequency=1, special_tokens=SPECIAL)
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>",
                                        additional_special_tokens=["<|im_start|>", "<|im_end|>"])
    tokenizer.chat_template = CHATML_TEMPLATE
    tokenizer.save_pretrained(str(folder))
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=max_positions, tie_word_embeddings=True,
                         bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id)
    Qwen2ForCausalLM(config).save_pretrained(str(folder), safe_serialization=True)
    return folder
