"""The reward of the list-program task: the completion runs on hidden inputs in a sandbox of its
own; its printed outputs are compared with the expected ones outside the sandbox.

The answer of an item is JSON `{"inputs": [...], "outputs": [...]}`. The program the sandbox runs
holds the completion's lines as the body of `f(v)` and the inputs, never the outputs: a completion
that reads its own source, the process's memory or the files it can see finds nothing to copy, and
an object that claims to equal anything prints as what it is. A completion scores 1 when every
output, printed as JSON, equals the expected one printed the same way (`True` is not `1`, a tuple
is a list only where JSON makes it one), 0 on any difference, crash, timeout or limit.
"""

from __future__ import annotations

import json
from typing import Any, Sequence

from rlbench.sandbox.program import ProgramLimits, run_many

MAX_PROGRAM_LINES = 32  # a completion's lines beyond this are not a solution of a list-program problem
RESULT_MARK = "RLBENCH-OUTPUTS "


def tests_of(answer: str) -> tuple[list[Any], list[Any]]:
    tests = json.loads(answer)
    return list(tests["inputs"]), list(tests["outputs"])


def program(completion: str, inputs: list[Any]) -> str:
    body = [line for line in str(completion).splitlines() if line.strip()][:MAX_PROGRAM_LINES] or ["pass"]
    return ("import json\n\ndef f(v):\n" + "".join(f"    {line}\n" for line in body) + "    return v\n\n"
            f"out = []\nfor x in json.loads({json.dumps(json.dumps(inputs))}):\n"
            "    try:\n        out.append(f(list(x)))\n    except Exception:\n        out.append(None)\n"
            f"print({RESULT_MARK!r} + json.dumps(out))\n")


def _outputs(stdout: str) -> str | None:
    lines = [line for line in stdout.splitlines() if line.startswith(RESULT_MARK)]
    return lines[-1][len(RESULT_MARK):].strip() if lines else None


def list_program_batch(completions: Sequence[str], answers: Sequence[str], timeout_s: float = 5.0,
                       memory_mb: int = 512) -> list[float]:
    limits = ProgramLimits(timeout_s=float(timeout_s), memory_mb=int(memory_mb))
    tests = [tests_of(a) for a in answers]
    results = run_many([program(c, inputs) for c, (inputs, _) in zip(completions, tests)], limits)
    scores = []
    for r, (_, outputs) in zip(results, tests):
        got = _outputs(r.stdout) if r.passed else None
        scores.append(1.0 if got is not None and got == json.dumps(outputs) else 0.0)
    return scores


def list_program(completion: str, answer: str, timeout_s: float = 5.0, memory_mb: int = 512) -> float:
    return list_program_batch([completion], [answer], timeout_s=timeout_s, memory_mb=memory_mb)[0]


list_program.batch = list_program_batch  # type: ignore[attr-defined]
