"""Which RL methods an agent's code uses, detected from the code itself, with the lines as evidence.

Peers label runs by the agent's own summary; we read the files the agent wrote. A method counts
when one of its patterns matches a line of code (comments and strings included: a config file
that sets `kl_coef` is evidence too). Harness-provided files are not the agent's code.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Sequence

from rlbench import safefs

METHODS: dict[str, list[str]] = {
    "GRPO": [r"\bgrpo\b", r"group_advantages", r"group_size", r"advantages?\s*=.*(mean|std)\("],
    "PPO": [r"\bppo\b", r"clip_eps|cliprange|clip_range", r"value_head|value_loss|\bgae\b"],
    "DPO": [r"\bdpo\b", r"logsigmoid\(.*beta|beta\s*\*\s*\(", r"chosen.*rejected|rejected.*chosen"],
    "SFT": [r"\bsft\b", r"cross_entropy|CrossEntropyLoss|nll_loss", r"labels\s*="],
    "reward shaping": [r"shap(ed|ing)_?reward|reward_shap", r"length_penalty|format_reward|partial_credit"],
    "KL penalty": [r"\bkl_coef\b|\bkl_beta\b|\bkl\s*=|\bkl_div\b|\bkl_penalty\b", r"reference_model|ref_model"],
}
CODE_SUFFIXES = {".py", ".sh", ".yaml", ".yml", ".json", ".toml", ".cfg"}
NOT_AGENT_CODE = {"task.json", "grade", "description.md", "baseline_config.yaml"}
SKIP_DIRS = {"model", "data", ".rlbench", "__pycache__", "checkpoint"}
MAX_EVIDENCE = 5


MAX_FILE_BYTES = 1_000_000
MAX_FILES = 2000


def agent_code_files(workspace: Path) -> list[Path]:
    """The agent's code files: regular files only, found without following links (the workspace is
    the agent's), small ones, at most MAX_FILES."""
    files = []
    for f in safefs.walk_files(Path(workspace), max_files=200_000, skip_dirs=(".git",)):
        rel = Path(f.rel)
        if (rel.suffix in CODE_SUFFIXES and f.rel not in NOT_AGENT_CODE
                and not any(part in SKIP_DIRS or part.startswith("checkpoint") for part in rel.parts[:-1])
                and rel.name not in ("steps.jsonl", "summary.json", "result.json") and f.size < MAX_FILE_BYTES):
            files.append(Path(workspace) / rel)
            if len(files) >= MAX_FILES:
                break
    return sorted(files)


def detect_methods(workspace: Path, commands: Sequence[tuple[int, str]] = ()) -> dict[str, dict[str, Any]]:
    """{method: {"evidence": [{"file", "line", "text"}...], "files": n}} for the methods found in
    the agent's files and in the commands it ran (`commands`: (trajectory step, command))."""
    compiled = {m: [re.compile(p, re.IGNORECASE) for p in pats] for m, pats in METHODS.items()}
    found: dict[str, dict[str, Any]] = {}
    sources: list[tuple[str, list[str]]] = []
    for path in agent_code_files(workspace):
        rel = path.relative_to(workspace).as_posix()
        text = safefs.try_read_text(Path(workspace), rel, MAX_FILE_BYTES)
        if text is not None:
            sources.append((rel, text.splitlines()))
    sources += [(f"command of tool call {step}", [cmd]) for step, cmd in commands]
    for rel, lines in sources:
        for method, patterns in compiled.items():
            for i, line in enumerate(lines, 1):
                if any(p.search(line) for p in patterns):
                    entry = found.setdefault(method, {"evidence": [], "files": set()})
                    entry["files"].add(rel)
                    if len(entry["evidence"]) < MAX_EVIDENCE:
                        entry["evidence"].append({"file": rel, "line": i, "text": line.strip()[:200]})
    return {m: {"evidence": e["evidence"], "files": len(e["files"])} for m, e in found.items()}
