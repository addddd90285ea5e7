"""What the harness records of a cell while the agent works: the trajectory and code snapshots.

`trajectory.jsonl`: one line per tool call (tool, arguments whole, result cut to a few KB, seconds, CPU
seconds of the commands it ran, time since the start), flushed per line so a crash loses at most
the call in flight. `running.json` names the sandboxed command in flight while it runs, so the
progress line can say what a long call is doing before its trajectory line exists.

Snapshots: a git repository in the cell folder, outside the workspace and the sandbox, with the
workspace as its work tree; one commit per tool call that changed files. Models, data and binary
weights are left out, and every snapshot is capped in size and count (`Snapshots`), so it holds
the agent's code revisions, not its checkpoints, and cannot outgrow the workspace's quota.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from rlbench import safefs
from rlbench.io import atomic_write_json

EXCLUDE = ["model/", "data/", ".rlbench/", "__pycache__/", "*.safetensors", "*.bin", "*.pt", "*.pth", "*.ckpt",
           "*.npy", "*.arrow", "*.parquet", "*.sock"]
MAX_FIELD = 4000


def cut(value: Any, limit: int = MAX_FIELD) -> Any:
    if isinstance(value, str) and len(value) > limit:
        return value[: limit // 2] + f"\n[... {len(value) - limit} chars cut ...]\n" + value[-limit // 2:]
    if isinstance(value, dict):
        return {k: cut(v, limit) for k, v in value.items()}
    if isinstance(value, list):
        return [cut(v, limit) for v in value[:200]]
    return value


class Trajectory:
    def __init__(self, path: Path):
        self.path = Path(path)
        self.steps = sum(1 for _ in open(self.path)) if self.path.exists() else 0

    def add(self, record: dict[str, Any]) -> None:
        """Results are cut to a few KB; arguments are kept whole, so a trajectory can be replayed."""
        self.steps += 1
        kept = {k: (v if k == "args" else cut(v)) for k, v in record.items()}
        with open(self.path, "a") as f:
            f.write(json.dumps({"step": self.steps, **kept}) + "\n")


def read_trajectory(path: Path) -> list[dict[str, Any]]:
    """Every complete line; a line cut short by a crash is skipped."""
    out = []
    if not Path(path).exists():
        return out
    for line in open(path):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


RUNNING_FILE = "running.json"


@contextlib.contextmanager
def running(cell_dir: Path, tool: str, command: str):
    """`running.json` in the cell folder for as long as the block runs."""
    path = Path(cell_dir) / RUNNING_FILE
    atomic_write_json(path, {"tool": tool, "command": command[:300], "started": time.time()})
    try:
        yield
    finally:
        path.unlink(missing_ok=True)


def in_flight(cell_dir: Path) -> str:
    """`exec for 95 s: python -m pipeline.train ...` while a call runs, else empty."""
    try:
        now = json.loads((Path(cell_dir) / RUNNING_FILE).read_text())
    except (OSError, ValueError):
        return ""
    command = " ".join(now["command"].split())
    command = command if len(command) <= 60 else command[:57] + "..."
    return f"{now['tool']} for {time.time() - now['started']:.0f} s: {command}"


class SnapshotError(RuntimeError):
    """A snapshot could not be taken (git failed or timed out); the tool call is recorded anyway."""


class Snapshots:
    """Code snapshots of a workspace the agent controls, so every limit is the harness's own.

    Which files go in is decided here, never by git's reading of the work tree: the tree is walked
    without following links (rlbench/safefs.py), only regular files are taken, each at most
    MAX_FILE bytes, at most MAX_FILES files and MAX_TOTAL bytes per snapshot, and the harness's
    exclusions (models, data, weights) apply. Each commit starts from an empty index and adds
    exactly that list with `--force`, so an agent's `.gitignore` cannot keep its code out, and a
    file it swaps for a FIFO or a link after the walk is skipped by git (`--ignore-errors`), never
    read through. Every git call has a timeout; a failure raises SnapshotError, which the caller
    records beside the tool call instead of losing the call."""

    MAX_FILE = 1024 * 1024
    MAX_FILES = 5000
    MAX_TOTAL = 64 * 1024 * 1024
    TIMEOUT_S = 60

    def __init__(self, git_dir: Path, work_tree: Path):
        self.git_dir, self.work_tree = Path(git_dir), Path(work_tree)
        self.commits = 0
        self.skipped: dict[str, int] = {}  # why files were left out of the last snapshot -> how many
        if not (self.git_dir / "HEAD").exists():
            self._git("init", "-q")
            self.commit("workspace as given")

    def _git(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess:
        cmd = ["git", "--literal-pathspecs", "-c", "safe.directory=*", "-c", "user.name=rlbench",
               "-c", "user.email=harness@rlbench", "-c", "commit.gpgsign=false", "-c", "core.hooksPath=/dev/null",
               "-c", "core.fsmonitor=false", "-c", "core.symlinks=true",
               f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}", *args]
        try:
            return subprocess.run(cmd, capture_output=True, input=stdin, timeout=self.TIMEOUT_S)
        except subprocess.TimeoutExpired as exc:
            raise SnapshotError(f"git {args[0]} took over {self.TIMEOUT_S} s") from exc

    def files(self) -> list[str]:
        """The workspace files a snapshot takes (relative paths), under the caps."""
        chosen, total = [], 0
        self.skipped = {}
        for f in safefs.walk_files(self.work_tree, max_files=200_000, skip_dirs=(".git",)):
            why = ("excluded" if _excluded(f.rel) else "larger than the per-file limit" if f.size > self.MAX_FILE
                   else "over the file count" if len(chosen) >= self.MAX_FILES
                   else "over the total size" if total + f.size > self.MAX_TOTAL else "")
            if why:
                self.skipped[why] = self.skipped.get(why, 0) + 1
                continue
            chosen.append(f.rel)
            total += f.size
        return chosen

    def commit(self, message: str) -> str | None:
        """Commit the workspace if anything changed; returns the commit id, or None."""
        (self.git_dir / "index").unlink(missing_ok=True)  # the index holds exactly this snapshot's list
        listing = b"\0".join(p.encode("utf-8", "surrogateescape") for p in self.files())
        if listing:
            self._git("add", "--force", "--ignore-errors", "--pathspec-from-file=-", "--pathspec-file-nul",
                      stdin=listing)
        if self.commits > 0 and self._git("diff", "--cached", "--quiet", "HEAD").returncode == 0:
            return None
        res = self._git("commit", "-q", "--allow-empty", "--no-verify", "-m", message)
        if res.returncode != 0:
            raise SnapshotError(f"git commit failed: {res.stderr.decode(errors='replace')[-300:]}")
        self.commits += 1
        return self.head()

    def head(self) -> str:
        return self._git("rev-parse", "--short", "HEAD").stdout.decode().strip()

    def log(self) -> list[str]:
        return self._git("log", "--format=%h %s").stdout.decode(errors="replace").splitlines()


def _excluded(rel: str) -> bool:
    parts = rel.split("/")
    if any(p + "/" in EXCLUDE for p in parts[:-1]):
        return True
    return any(fnmatch.fnmatch(parts[-1], pat) for pat in EXCLUDE if not pat.endswith("/"))
