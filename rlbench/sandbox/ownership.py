"""Who owns what the sandbox may write: the unprivileged uid commands run as when the harness is
root (the kernel never applies RLIMIT_NPROC to root), and the harness's hand-over of files to it.

Every chown here changes a link itself, never what it points to: the workspace is the agent's, and
a link in it may have been planted to make the root harness hand a host file over."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

SANDBOX_UID = 65534  # nobody


def sandbox_owner() -> int | None:
    """The uid files the harness writes for the agent get (None: not root, they stay the user's)."""
    return SANDBOX_UID if os.geteuid() == 0 else None


def give_to_sandbox(*paths: Path) -> None:
    """Files the harness writes for the agent belong to the sandbox uid, like the rest of it."""
    if os.geteuid() != 0:
        return
    for p in paths:
        with contextlib.suppress(OSError):  # a file the agent already removed
            os.chown(p, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)


def give_tree_to_sandbox(root: Path) -> None:
    """As root, hand a whole folder to the sandbox uid: the workspace is its only writable place."""
    if os.geteuid() != 0:
        return
    for dirpath, dirnames, filenames in os.walk(root):  # os.walk does not descend into links
        os.chown(dirpath, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)
        for name in filenames + [d for d in dirnames if os.path.islink(os.path.join(dirpath, d))]:
            os.chown(os.path.join(dirpath, name), SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)
