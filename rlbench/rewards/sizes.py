"""How much text one reward request may carry, following the task.

The reward endpoint's caps were fixed for the generated tasks' 8-token answers: 1,000 characters
per completion and a 64 KiB request line. A real task's completions run to ~1,000 tokens (4,000+
characters) with the final answer last, so a fixed 1,000-character cut scores a correct GSM8K
solution 0, and 256 of them do not fit 64 KiB. The caps here follow the task's own
`eval.max_new_tokens` instead: the character cap above a floor (today's 1,000, which small tasks
keep), both caps below a ceiling (the sandbox is hostile: every size and count stays bounded
whatever a task says). The client (rlbench/rewards/source.py) and the server (rlbench/grading/rewards.py) both read them
from the same task spec, so what an honest client sends always fits.
"""

from __future__ import annotations

from typing import Any

CHARS_PER_TOKEN = 8  # generous: tokenizers average ~4 characters a token on English and math
MIN_COMPLETION_CHARS = 1000  # the floor: the cut every task had before
MAX_COMPLETION_CHARS = 256 * 1024  # the ceiling: 32k tokens of 8 characters
MAX_PER_REQUEST = 1024  # completions the server scores in one request
CHUNK = 256  # completions the client sends in one request (fewer when they would not fit the line)
MAX_REQUEST_BYTES = 64 * 1024 ** 2  # the ceiling: what one connection may make the grader hold
ITEM_BYTES = 64  # a completion's share of the line beyond its text: its id, quotes, separators
REQUEST_BYTES = 4096  # the rest of the line: the op, the keys


def completion_chars(task: Any) -> int:
    """The characters of one completion that are scored: all a model can write in the task's
    `eval.max_new_tokens`, within [MIN_COMPLETION_CHARS, MAX_COMPLETION_CHARS]."""
    want = CHARS_PER_TOKEN * int(task.eval.max_new_tokens)
    return min(MAX_COMPLETION_CHARS, max(MIN_COMPLETION_CHARS, want))


def request_bytes(task: Any) -> int:
    """The longest reward request line the grading server reads for this task: a full request of
    MAX_PER_REQUEST completions at the task's character cap (a JSON string of plain ASCII text
    takes a byte a character), at most MAX_REQUEST_BYTES. The old 64 KiB line stays the floor of
    every other op (rlbench/grading/server.py); it never held a full request even of 1,000-character
    completions. Text that escapes longer (newlines, non-ASCII: up to 12 bytes a character) goes
    in more requests: the client packs by encoded size, and any completion under the character
    cap fits one request (12 * MAX_COMPLETION_CHARS < MAX_REQUEST_BYTES)."""
    want = MAX_PER_REQUEST * (completion_chars(task) + ITEM_BYTES) + REQUEST_BYTES
    return min(MAX_REQUEST_BYTES, want)


__all__ = ["CHUNK", "MAX_PER_REQUEST", "completion_chars", "request_bytes"]
