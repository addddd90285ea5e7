"""Answer extraction as a declared step: which part of a text is its final answer.

Datasets disagree on where the answer goes: GSM8K's solutions end `#### 72`, MATH boxes it
(`\\boxed{\\frac{3}{4}}`), chat models end with "so the answer is 72." A verifier that guesses
one convention scores another dataset's correct answers 0, so a task names its convention:
`extract(name, text, **params)` with a name from `EXTRACTORS`, checked when the task loads
(`check_extractor`). Each extractor returns the answer's text (or None when the text has none);
`parse_number` then reads it as an exact number.
"""

from __future__ import annotations

import re
from collections import deque
from fractions import Fraction
from functools import lru_cache
from typing import Callable, Iterator, Optional

from rlbench.config.core import ConfigError

# The extractors that look for a final answer read only the end of a text. Every convention puts
# the answer last, and the text may be hostile: through the reward endpoint an agent sends any
# string up to the message cap, and the grader computes rewards in its own threads, so the cost
# of one extraction must not grow with the completion (4,000 characters is ~1,000 tokens of
# reasoning before the answer, far more than any final line needs).
TAIL_CHARS = 4000
# A numeral longer than this is not an answer; int() refuses over 4,300 digits with a ValueError,
# which would turn a hostile completion into a grader error instead of a 0.
MAX_NUMBER_CHARS = 100

Extractor = Callable[..., Optional[str]]

_DIGITS = r"(?:[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)(?:\.[0-9]+)?|\.[0-9]+"  # 1,234.5 | 1234.5 | .5
_SIGN = "[-+\u2212]"  # U+2212 is the minus sign of typeset math
# A number in running text: not the tail of a word or of another number ("x2", "1.2.3" gives nothing,
# "12/25/2020" not "25/2020"), a sign only where it cannot be an operator ("5-3" is 5 and 3, "= -3" is -3).
_NUMBER_IN_TEXT = re.compile(
    rf"(?<![\w./])(?:{_SIGN})?\$?(?:[0-9]+/[0-9]+(?![0-9/])|{_DIGITS})(?![\w]|\.[0-9])")
# A whole answer: parse_number's grammar (after an outer `$`, `%` and one trailing period go).
_WHOLE_NUMBER = re.compile(rf"({_SIGN}?)(?:([0-9]+)/([0-9]+)|({_DIGITS}))")
# The answer markers of parse_int_answer (rlbench/rewards/exact.py): `####`, `answer is`, `answer:`.
MARKER = re.compile(r"(?:####|answer\s*(?:is)?\s*[:=]?)", re.IGNORECASE)


def after_last_marker(text: str) -> str:
    """The text after the last answer marker ("answer: 3 ... the answer is 5" means 5), or the
    whole text when it has none."""
    markers = list(MARKER.finditer(text))
    return text[markers[-1].end():] if markers else text


def gsm8k(text: str) -> str | None:
    """GSM8K's convention: the rest of the line after the last `####`, stripped. Only that line:
    a model that keeps writing after its answer ("#### 72\\nQuestion: ...") still has answered 72."""
    tail = text[-TAIL_CHARS:]
    at = tail.rfind("####")
    if at < 0:
        return None
    return tail[at + 4:].split("\n", 1)[0].strip()


def boxed(text: str) -> str | None:
    """MATH's convention: the content of the last complete `\\boxed{...}` (or `\\fbox{...}`),
    nested braces included (`\\boxed{\\frac{3}{4}}` gives `\\frac{3}{4}`); a box cut off before
    its closing brace does not count, the one before it does."""
    tail = text[-TAIL_CHARS:]
    closes: dict[int, int] = {}  # the position of each `{` -> its matching `}`, in one pass
    opened: list[int] = []
    for i, ch in enumerate(tail):
        if ch == "{":
            opened.append(i)
        elif ch == "}" and opened:
            closes[opened.pop()] = i
    for m in reversed(list(re.finditer(r"\\(?:boxed|fbox)\s*\{", tail))):
        brace = m.end() - 1
        if brace in closes:
            return tail[brace + 1:closes[brace]].strip()
    return None


def _last(matches: Iterator[re.Match[str]]) -> re.Match[str] | None:
    """The last of `matches` (None when there is none): every convention puts its answer last."""
    last = deque(matches, maxlen=1)
    return last[0] if last else None


def last_number(text: str) -> str | None:
    """The last number in the text (the usual convention where an answer has no marker: the
    reasoning comes first, the result last): "I think 3, no wait, 5" answers 5."""
    found = _last(_NUMBER_IN_TEXT.finditer(text[-TAIL_CHARS:]))
    return found.group(0) if found is not None else None


def marker(text: str) -> str | None:
    """The first number after the last answer marker (`####`, `answer is`, `answer:`), else the
    first number: the convention of exact_int (parse_int_answer), here for any number. It reads
    the whole text, as parse_int_answer does; its regexes are linear, so a long text costs time
    in proportion, never more."""
    found = _NUMBER_IN_TEXT.search(after_last_marker(text))
    return found.group(0) if found is not None else None


@lru_cache(maxsize=64)
def _compiled(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern)


def regex(text: str, pattern: str = "") -> str | None:
    """A task's own convention: the last match of `pattern` in the end of the text, its group 1
    when it has groups, else the whole match."""
    if not pattern:
        raise ConfigError("the regex extractor needs `pattern`")
    rx = _compiled(pattern)
    found = _last(rx.finditer(text[-TAIL_CHARS:]))
    if found is None:
        return None
    return found.group(1) if rx.groups else found.group(0)


EXTRACTORS: dict[str, Extractor] = {"gsm8k": gsm8k, "boxed": boxed, "last_number": last_number,
                                    "marker": marker, "regex": regex}


def check_extractor(name: object, key: str) -> None:
    """Refuse an extractor name that is not registered, naming the allowed ones: called when a
    task spec is validated, before any work (`key` is the spec's key, for the message)."""
    if not isinstance(name, str) or name not in EXTRACTORS:
        raise ConfigError(f"key '{key}': value '{name}' is not allowed; allowed: {', '.join(sorted(EXTRACTORS))}")


def extract(name: str, text: str, **params: str) -> str | None:
    """The answer `name`'s convention finds in `text`, or None."""
    check_extractor(name, "extract")
    return EXTRACTORS[name](str(text), **params)


def parse_number(text: str | None) -> Fraction | None:
    """An answer's exact value: tolerant of what people write around a number (surrounding space,
    a sign, thousands separators `1,234`, decimals, a leading `$`, a trailing period or `%`, a
    simple fraction `3/4`), nothing else: `1.2.3`, `72 apples`, `\\frac{3}{4}` are None. A `%` is
    dropped, not divided: "50%" answers a question whose answer is 50. Exact, so 72 == 72.0 ==
    "72.00" and 0.1 + 0.2 questions compare as written."""
    if text is None:
        return None
    s = text.strip()
    if len(s) > MAX_NUMBER_CHARS:
        return None
    s = s.removesuffix(".").rstrip()
    s = s.removesuffix("\\%").removesuffix("%").rstrip()
    for dollar in ("\\$", "$"):  # "$-5", "\$5" (LaTeX) and "-$5" alike
        if s.startswith(dollar):
            s = s[len(dollar):].lstrip()
        elif s[:1] in "-+\u2212" and s[1:].startswith(dollar):
            s = s[0] + s[1 + len(dollar):].lstrip()
    m = _WHOLE_NUMBER.fullmatch(s)
    if m is None:
        return None
    sign, num, den, dec = m.groups()
    if dec is not None:
        value = Fraction(dec.replace(",", ""))
    elif int(den) == 0:
        return None
    else:
        value = Fraction(int(num), int(den))
    return -value if sign in ("-", "\u2212") else value


__all__ = ["EXTRACTORS", "TAIL_CHARS", "after_last_marker", "check_extractor", "extract", "parse_number",
           "gsm8k", "boxed", "last_number", "marker", "regex"]
