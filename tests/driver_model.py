"""A tiny driver model that makes one real tool call: the Qwen2 chat stand-in (rlbench/models/standin.py)
taught, in half a minute of training, to answer any ChatML conversation with a Hermes-format call
that submits the workspace's base model (the format Qwen2.5's template asks for and vLLM's `hermes` parser reads). The server,
its parser, the agent's loop and the tools then run as they would for a real open model."""

from __future__ import annotations

from pathlib import Path

ARGS = '{"name": "submit", "arguments": {"path": "model"}}'
CALL = f"<tool_call>{ARGS}</tool_call>"  # vLLM's hermes parser: <tool_call>(.*?)</tool_call>
HEAD_DIM_OK = 128  # hidden size: 4 heads of 32 (vLLM's CPU attention has no head_dim 16)


def build_tool_calling_standin(folder: Path, steps: int = 60, seed: int = 0) -> Path:
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from rlbench.models.standin import build_chat_standin

    build_chat_standin(folder, hidden=HEAD_DIM_OK, max_positions=16384, seed=seed)
    tok = AutoTokenizer.from_pretrained(str(folder))
    # the call's three pieces as tokens of their own (Qwen2.5 has <tool_call> and </tool_call> as
    # added tokens too), so that each next token of the answer follows from the one before: a
    # 2-layer model learns that in seconds, where spelling the call out byte by byte it did not
    tok.add_tokens(["<tool_call>", "</tool_call>", ARGS])
    tok.save_pretrained(str(folder))
    model = AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32)
    model.resize_token_embeddings(len(tok))
    model.train()
    gen = torch.Generator().manual_seed(seed)
    target = tok(CALL + "<|im_end|>", add_special_tokens=False)["input_ids"]
    ordinary = torch.arange(len(tok.all_special_ids), len(tok) - 3)  # not the call's own tokens

    def text(n: int) -> str:
        return tok.decode(ordinary[torch.randint(len(ordinary), (n,), generator=gen)].tolist())

    def conversation() -> list[int]:
        """A ChatML conversation shaped like the agent's: a system prompt, the task, then turns of
        (the call, as the template renders an assistant turn with tool calls: empty) and a result."""
        msgs = [{"role": "system", "content": text(20)}, {"role": "user", "content": text(int(torch.randint(20, 300, (1,), generator=gen)))}]
        for _ in range(int(torch.randint(0, 4, (1,), generator=gen))):
            msgs += [{"role": "assistant", "content": ""}, {"role": "tool", "content": text(int(torch.randint(5, 60, (1,), generator=gen)))}]
        return tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]

    opt = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(steps):
        contexts = [conversation() for _ in range(8)]
        width = max(len(c) for c in contexts) + len(target)
        ids = torch.full((len(contexts), width), tok.pad_token_id)
        labels = torch.full_like(ids, -100)  # learn the answer only
        for i, c in enumerate(contexts):  # left-padded, so every answer ends the row
            row = c + target
            ids[i, width - len(row):] = torch.tensor(row)
            labels[i, width - len(target):] = torch.tensor(target)
        mask = (torch.arange(width)[None, :] >= (width - torch.tensor([len(c) + len(target) for c in contexts]))[:, None])
        loss = model(input_ids=ids, attention_mask=mask.long(), labels=labels).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.save_pretrained(str(folder), safe_serialization=True)
    return folder
