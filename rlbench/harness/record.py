"""What the harness records of a cell while the agent works: the trajectory and code snapshots.

`trajectory.jsonl`: one line per tool call (tool, arguments whole, result cut to a few KB, seconds, CPU
seconds of the commands it ran, time since the start), flushed per line so a crash loses at most
the call in flight. `running.json` names the sandboxed command in flight while it runs, so the
progress line can say what a long call is doing before its trajectory line exists.

Snapshots: a git repository in the cell folder, outside the workspace and the sandbox, with the
workspace as its work tree; one commit per tool call that changed files. Models, data and binary
weights are left out, so it holds the agent's code revisions, not its checkpoints.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import time
from pathlib import Path
from typing import Any

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


class Snapshots:
    def __init__(self, git_dir: Path, work_tree: Path):
        self.git_dir, self.work_tree = Path(git_dir), Path(work_tree)
        self.commits = 0
        if not (self.git_dir / "HEAD").exists():
            self._git("init", "-q")
            (self.git_dir / "info").mkdir(parents=True, exist_ok=True)
            (self.git_dir / "info" / "exclude").write_text("\n".join(EXCLUDE) + "\n")
            self.commit("workspace as given")

    def _git(self, *args: str) -> subprocess.CompletedProcess:
        cmd = ["git", "-c", "safe.directory=*", "-c", "user.name=rlbench", "-c", "user.email=harness@rlbench",
               "-c", "commit.gpgsign=false", f"--git-dir={self.git_dir}", f"--work-tree={self.work_tree}", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=120)

    def commit(self, message: str) -> str | None:
        """Commit the workspace if anything changed; returns the commit id, or None."""
        self._git("add", "-A")
        if self._git("diff", "--cached", "--quiet").returncode == 0 and self.commits > 0:
            return None
        res = self._git("commit", "-q", "--allow-empty" if self.commits == 0 else "--quiet", "-m", message)
        if res.returncode != 0:
            return None
        self.commits += 1
        return self._git("rev-parse", "--short", "HEAD").stdout.strip()

    def head(self) -> str:
        return self._git("rev-parse", "--short", "HEAD").stdout.strip()

    def log(self) -> list[str]:
        return self._git("log", "--format=%h %s").stdout.splitlines()
