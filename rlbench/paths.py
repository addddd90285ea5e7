"""Where rlbench keeps what it builds.

Two roots on purpose: `public` holds what an agent may later see (models, train and dev splits),
`hidden` holds test and heldout splits and the harness's own records. Workspaces are assembled only
from the public root, so a hidden split can never be copied into one by accident.
"""

from __future__ import annotations

import contextlib
import os
import secrets
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


def stored_secret(path: Path) -> str:
    """The secret kept in `path` (a file under the hidden root): made once with 128 random bits,
    mode 600, then read. Made beside it and linked in, so two processes that start at once both
    end up reading the one that landed first, and a half-written secret is never read."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}")
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(16))
        try:  # a link never replaces a secret another process made first; theirs is the one read
            with contextlib.suppress(FileExistsError):
                os.link(tmp, path)
        finally:
            tmp.unlink()
    return path.read_text().strip()
