"""Where rlbench keeps what it builds.

Two roots on purpose: `public` holds what an agent may later see (models, train and dev splits),
`hidden` holds test and heldout splits and the harness's own records. Workspaces are assembled only
from the public root, so a hidden split can never be copied into one by accident.
"""

from __future__ import annotations

import os
from pathlib import Path


def home() -> Path:
    """The rlbench cache root: `RLBENCH_HOME`, default `~/.cache/rlbench`."""
    return Path(os.environ.get("RLBENCH_HOME", Path.home() / ".cache" / "rlbench")).expanduser()


def public_root() -> Path:
    return home() / "public"


def hidden_root() -> Path:
    """Hidden splits live here; `RLBENCH_HIDDEN_HOME` moves them to a separate volume."""
    override = os.environ.get("RLBENCH_HIDDEN_HOME")
    return Path(override).expanduser() if override else home() / "hidden"


def models_root() -> Path:
    return public_root() / "models"


def scores_root() -> Path:
    """Cached harness scores (baselines and checkpoints), keyed by weights x task x protocol."""
    return hidden_root() / "scores"


def repo_root() -> Path:
    """The source checkout (tasks/ lives beside the package)."""
    return Path(__file__).resolve().parent.parent


def tasks_root() -> Path:
    """Task folders: `RLBENCH_TASKS` or the checkout's `tasks/`."""
    override = os.environ.get("RLBENCH_TASKS")
    return Path(override).expanduser() if override else repo_root() / "tasks"
