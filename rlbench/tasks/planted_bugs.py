"""Debug tasks: a copy of the reference GRPO pipeline with one planted bug, and the scoring of an
agent's fix and diagnosis.

The workspace gets `pipeline/` (loss.py, train.py: the reference GRPO's own files, imports made
local, runnable as `python -m pipeline.train task=. out=DIR seed=N`) with one bug from `BUGS`
planted by a text substitution. Which bug a cell gets depends on the task, the seed and a secret
kept in the harness's hidden root. The bug is recorded in the cell folder, never in the workspace.
The sandbox of a debug cell shows this module and the pipeline it copies as empty
(`hidden_from_agent`): with the table of substitutions, or the working files to diff against, the
bug would be found by a text search, not by debugging.

Scoring, beside the usual test gain of the chosen submission:
- `named`: the agent's `DIAGNOSIS.md` names the bug: some one sentence of it matches every pattern
  group of the bug's kind; `also_named` lists the other kinds it names (a diagnosis that names
  them all is a guess, and `diagnosed` is then false);
- `snippet_removed`: the planted line is gone from the workspace's pipeline at the end;
- `recipe_uses_pipeline`: the chosen submission's recipe runs the given pipeline (a run of some
  other GRPO proves nothing about the fix).
"""

from __future__ import annotations

import hashlib
import os
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlbench.config.core import check
from rlbench.tasks.spec import DIAGNOSIS_FILE, PIPELINE_DIR, RUN_COMMAND, DebugConfig
from rlbench.paths import hidden_root, repo_root

__all__ = ["BUGS", "DIAGNOSIS_FILE", "PIPELINE_DIR", "RUN_COMMAND", "check_bugs", "check_kinds", "choose_bug", "hidden_from_agent",
           "names_kind", "plant", "reference_sources", "score_debug"]

MAIN_BLOCK = '''

if __name__ == "__main__":  # python -m pipeline.train task=. out=runs/NAME seed=N [key=value ...]
    import json
    import sys

    from rlbench.config.core import load_config

    summary = run(load_config(GRPOConfig, None, overrides=sys.argv[1:], source_name="pipeline.train"))
    print(json.dumps({k: summary.get(k) for k in ("steps", "seconds", "checkpoint")}))
'''


@dataclass(frozen=True)
class Bug:
    kind: str
    file: str  # loss.py or train.py inside pipeline/
    old: str  # text of the working pipeline
    new: str  # what replaces it: the bug
    patterns: tuple[str, ...]  # regexes a sentence naming the bug matches, every one of them
    effect: str  # what a user of the pipeline sees (for the task's documentation)


BUGS: dict[str, Bug] = {b.kind: b for b in [
    Bug("advantage_sign", "loss.py",
        "adv = groups - groups.mean(dim=1, keepdim=True)",
        "adv = groups.mean(dim=1, keepdim=True) - groups",
        (r"advantage", r"sign|negat|flip|invert|revers|opposite|backward"),
        "reward falls: completions that beat their group are pushed down"),
    Bug("ungrouped_advantages", "loss.py",
        "groups = rewards.view(-1, group_size)",
        "groups = rewards.view(group_size, -1).t()",
        (r"advantage|baseline", r"group",
         r"\bnot\b.*\b(within|per|each|by)\b|n't.*\b(within|per|each|by)\b|across|mix|stride|other prompts|"
         r"different prompts|whole batch"),
        "learns slowly and noisily: completions are compared with other prompts' completions"),
    Bug("kl_sign", "loss.py",
        "per_token = per_token + kl_coef * kl",
        "per_token = per_token - kl_coef * kl",
        (r"\bkl\b|kullback|divergence", r"sign|negat|flip|subtract|minus|revers|opposite|away"),
        "KL to the reference grows without bound; the policy drifts"),
    Bug("missing_detach", "train.py",
        "grpo_loss(logp, logp.detach() if old is None else old,",
        "grpo_loss(logp, logp if old is None else old,",
        (r"detach|stop[- ]?grad", r"old|ratio|log[- _]?p"),
        "silently does not learn: the ratio logp - logp has zero gradient"),
    Bug("lr_off", "train.py",
        "lr: float = 3e-4",
        "lr: float = 3e-9",
        (r"learning[ _-]?rate|\blr\b", r"small|tiny|low|off|wrong|3e-9|1e-9|orders? of magnitude"),
        "silently does not learn: the weights barely move"),
    Bug("reward_wrong_field", "train.py",
        "rewards = batch_rewards(task, flat_items, [c.text for comps in groups for c in comps])",
        "rewards = batch_rewards(task, flat_items, [it[\"prompt\"] for it in flat_items])",
        (r"reward", r"prompt|wrong (field|text|input)|instead of (the )?completion"),
        "silently does not learn: every completion of a prompt gets the same reward"),
]}


def reference_sources(pipeline: str = "grpo") -> dict[str, str]:
    """The working pipeline as the workspace holds it: the reference files, imports made local,
    train.py runnable as a module."""
    if pipeline != "grpo":
        raise ValueError(f"debug pipeline '{pipeline}': only grpo has planted bugs")
    folder = repo_root() / "reference_pipelines" / "grpo"
    loss = (folder / "loss.py").read_text()
    train = (folder / "train.py").read_text().replace("from reference_pipelines.grpo.loss import",
                                                      "from pipeline.loss import")
    if "from pipeline.loss import" not in train:
        raise RuntimeError("reference_pipelines/grpo/train.py no longer imports its loss as expected")
    return {"__init__.py": "", "loss.py": loss, "train.py": train.rstrip("\n") + "\n" + MAIN_BLOCK}


def hidden_from_agent(pipeline: str = "grpo") -> list[str]:
    """What a debug cell's sandbox shows empty (SandboxConfig.hide): this module, whose table
    holds every planted line, and the reference pipeline the workspace's copy was made from. The
    sandbox never needs either: the workspace's pipeline imports only `reference_pipelines.common`
    and rlbench's engines, and the SDK the constants above, which live in rlbench.tasks.spec."""
    return [str(Path(__file__).resolve()), str(repo_root() / "reference_pipelines" / pipeline)]


def check_kinds(debug: DebugConfig) -> None:
    """A task's `debug.bugs` names only kinds in the table (at task load, in the harness)."""
    for kind in debug.bugs:
        check(kind in BUGS, "debug.bugs", kind, ", ".join(BUGS))


def check_bugs(pipeline: str = "grpo") -> None:
    """Every planted bug still applies to the reference files (run by the tests: a change to the
    reference pipeline that moves a line breaks a bug loudly, not silently)."""
    sources = reference_sources(pipeline)
    for bug in BUGS.values():
        if sources[bug.file].count(bug.old) != 1:
            raise RuntimeError(f"planted bug {bug.kind}: {bug.old!r} is not exactly once in {bug.file}")


def _secret() -> bytes:
    path = hidden_root() / "debug_secret"
    if not path.exists():
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))
    return path.read_bytes().strip()


def choose_bug(task_name: str, seed: int, kinds: list[str]) -> str:
    """The bug of one cell: fixed for (task, seed) on this machine, unpredictable from inside."""
    pool = sorted(kinds or BUGS)
    digest = hashlib.sha256(_secret() + f":{task_name}:{seed}".encode()).digest()
    return pool[int.from_bytes(digest[:8], "big") % len(pool)]


def plant(workspace: Path, kind: str, pipeline: str = "grpo") -> Path:
    """Write `pipeline/` into the workspace with bug `kind` planted."""
    bug = BUGS[kind]
    sources = reference_sources(pipeline)
    sources[bug.file] = sources[bug.file].replace(bug.old, bug.new, 1)
    folder = workspace / PIPELINE_DIR
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in sources.items():
        (folder / name).write_text(text)
    return folder


def _sentences(text: str) -> list[str]:
    return [s for s in re.split(r"(?<=[.!?])\s+|\n+", text) if s.strip()]


def names_kind(text: str, kind: str) -> bool:
    """Whether one sentence of `text` matches every pattern of the bug kind."""
    pats = [re.compile(p, re.IGNORECASE) for p in BUGS[kind].patterns]
    return any(all(p.search(s) for p in pats) for s in _sentences(text))


def score_debug(workspace: Path, kind: str, recipe: str) -> dict[str, Any]:
    """The debug part of a cell's result (see the module docstring)."""
    bug = BUGS[kind]
    from rlbench import safefs

    # the agent's files: read without following links, regular files only, capped
    text = (safefs.try_read_text(workspace, DIAGNOSIS_FILE, 1 << 20) or "")[:20000]
    named = bool(text) and names_kind(text, kind)
    others = [k for k in BUGS if k != kind and text and names_kind(text, k)]
    code = safefs.try_read_text(workspace, f"{PIPELINE_DIR}/{bug.file}", 4 << 20)
    removed = code is not None and bug.new not in code
    uses = bool(re.search(r"\bpipeline[./]train\b|\bpipeline\b.*train", recipe or ""))
    return {"bug": kind, "file": f"{PIPELINE_DIR}/{bug.file}", "diagnosis_chars": len(text), "named": named,
            "also_named": others, "diagnosed": named and not others, "snippet_removed": removed,
            "recipe_uses_pipeline": uses}
