"""Run one untrusted Python program (a model's completion and its unit tests) under hard limits.

A code task's reward runs whatever a model wrote: it may loop, fork without end, fill the disk,
read the host's files or open sockets. The harness scores it as root, so each program runs in a
bubblewrap sandbox of its own: a fresh PID namespace (every process it starts dies with it), no
network, the system and the Python install read-only, nothing of the host's writable but a small
private `/tmp`, no workspace, no grading socket, no task folder, a minimal environment; and the
rlimits of address space, CPU seconds, file size, open files and processes, under a wall clock.

As root the program runs as an unprivileged uid of its own slot (`SLOT_UID_BASE + k`): RLIMIT_NPROC
counts every process of a uid, so a fork bomb in one program must not take the process quota of
another program scored beside it (or of an agent's sandbox, uid 65534). A slot is held with an
flock across processes, so two cells scoring at once never share one.

Where bubblewrap cannot start and the caller is not root (inside an agent's own sandbox, whose
`/proc` cannot be remounted, or a user's machine without bwrap) the program runs as a plain child
with the same rlimits and wall clock in a fresh temporary folder: the agent's sandbox is then the
isolation. As root without bubblewrap nothing runs (`SandboxUnavailable`).
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import random
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import IO, Iterator, Sequence

from rlbench.config.core import check
from rlbench.sandbox.runner import SandboxUnavailable

SLOT_UID_BASE = 65000  # uids 65000..65000+SLOTS-1: Debian's reserved range, owned by no file
SLOTS = 256
MAX_SOURCE_BYTES = 4 * 1024 ** 2  # a program's source: completion and tests (HumanEval+ tests run to ~1 MB)


@dataclass(frozen=True)
class ProgramLimits:
    """What one program may use. The defaults follow HumanEval's and MBPP's harnesses (a few
    seconds a problem), with room for a slow machine."""

    timeout_s: float = 10.0
    memory_mb: int = 1024  # address space per process
    max_processes: int = 8  # per program (bwrap as root: its slot's uid)
    max_file_mb: int = 16
    tmp_mb: int = 64  # the private /tmp, its working folder
    max_open_files: int = 64
    output_bytes: int = 4096  # stdout/stderr kept, for a reason a person can read

    def validate(self, key: str = "limits") -> None:
        check(0 < self.timeout_s <= 600, f"{key}.timeout_s", self.timeout_s, "in (0, 600]")
        check(64 <= self.memory_mb <= 65536, f"{key}.memory_mb", self.memory_mb, "in [64, 65536]")
        check(1 <= self.max_processes <= 256, f"{key}.max_processes", self.max_processes, "in [1, 256]")
        check(1 <= self.max_file_mb <= 4096, f"{key}.max_file_mb", self.max_file_mb, "in [1, 4096]")
        check(1 <= self.tmp_mb <= 4096, f"{key}.tmp_mb", self.tmp_mb, "in [1, 4096]")
        check(16 <= self.max_open_files <= 4096, f"{key}.max_open_files", self.max_open_files, "in [16, 4096]")


@dataclass(frozen=True)
class ProgramResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    timed_out: bool
    isolation: str  # bwrap | rlimits

    @property
    def passed(self) -> bool:
        return self.returncode == 0 and not self.timed_out


def run_python(source: str, limits: ProgramLimits = ProgramLimits()) -> ProgramResult:
    """Run `source` with the harness's Python (its standard library and the virtualenv's packages,
    read-only) in isolated mode, reading the program from stdin: no argument-length cap on the
    source, and the program itself reads an empty stdin."""
    data = source.encode("utf-8", "replace")
    if len(data) > MAX_SOURCE_BYTES:
        return ProgramResult(-1, "", f"program of {len(data)} bytes refused (at most {MAX_SOURCE_BYTES})", 0.0,
                             False, isolation())
    with tempfile.TemporaryFile() as stdin:
        stdin.write(data)
        stdin.seek(0)
        if isolation() == "bwrap":
            with _slot() as slot:
                return _run(_bwrap_argv(limits, slot), stdin, limits, None, "bwrap")
        with tempfile.TemporaryDirectory(prefix="rlbench-prog-") as cwd:
            return _run([sys.executable, "-I", "-"], stdin, limits, cwd, "rlimits")


def run_many(sources: Sequence[str], limits: ProgramLimits = ProgramLimits(), workers: int = 0) -> list[ProgramResult]:
    """`run_python` for each source, in order, `workers` at a time (0: this machine's CPU count,
    at most 16): a program mostly waits on its interpreter's start, so a batch of completions
    scores in a fraction of the time one after another would take. Each distinct source runs once
    and its result stands for every copy: a model's samples of one prompt are often the same text
    (a base's greedy answer and most of its samples), and a completion's reward is a function of
    its text, not of how many times it was drawn."""
    if not sources:
        return []
    distinct = list(dict.fromkeys(sources))
    n = workers or min(16, os.cpu_count() or 1)
    if n <= 1 or len(distinct) == 1:
        done = [run_python(s, limits) for s in distinct]
    else:
        with ThreadPoolExecutor(max_workers=min(n, len(distinct)), thread_name_prefix="rlbench-prog") as pool:
            done = list(pool.map(lambda s: run_python(s, limits), distinct))
    by_source = dict(zip(distinct, done))
    return [by_source[s] for s in sources]


@lru_cache(maxsize=1)
def isolation() -> str:
    """`bwrap` where a bubblewrap sandbox starts here, else `rlimits` (not root only). Probed once
    per process: the answer does not change while it runs."""
    if shutil.which("bwrap") is not None:
        probe = subprocess.run(_bwrap_argv(ProgramLimits(), 0, probe=True), stdin=subprocess.DEVNULL,
                               capture_output=True, timeout=60, preexec_fn=_limits_fn(ProgramLimits(), None))
        if probe.returncode == 0:
            return "bwrap"
        why = probe.stderr.decode("utf-8", "replace").strip()[-300:]
    else:
        why = "bwrap is not installed"
    if os.geteuid() == 0:
        raise SandboxUnavailable(f"a model's code cannot be run here: {why}. The harness runs as root and never runs "
                                 "it outside a sandbox: install bubblewrap (`make setup` does)")
    return "rlimits"


def _bwrap_argv(limits: ProgramLimits, slot: int | None, probe: bool = False) -> list[str]:
    root = os.geteuid() == 0
    unshare = (["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
               if root else ["--unshare-all"])
    args = [shutil.which("bwrap") or "bwrap", *unshare, "--die-with-parent", "--new-session",
            "--hostname", "rlbench-program", "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib64", "sbin"):
        p = Path("/") / name
        if p.is_symlink():
            args += ["--symlink", os.readlink(p), str(p)]
        elif p.is_dir():
            args += ["--ro-bind", str(p), str(p)]
    size = str(limits.tmp_mb * 1024 * 1024)
    args += ["--proc", "/proc", "--dev", "/dev",
             "--perms", "1777", "--size", size, "--tmpfs", "/tmp",
             "--perms", "1777", "--size", size, "--tmpfs", "/dev/shm"]
    made: set[str] = set()
    for p in dict.fromkeys(Path(x).resolve() for x in (sys.base_prefix, sys.prefix)):
        if str(p).startswith("/usr/"):
            continue
        for parent in reversed(p.parents):  # 0755, so the slot's uid can reach a Python under a 0700 /root
            if str(parent) != "/" and str(parent) not in made:
                made.add(str(parent))
                args += ["--perms", "0755", "--dir", str(parent)]
        args += ["--ro-bind", str(p), str(p)]
    args += ["--chdir", "/tmp", "--clearenv", "--setenv", "PATH", "/usr/bin:/bin", "--setenv", "HOME", "/tmp",
             "--setenv", "LANG", "C.UTF-8", "--setenv", "PYTHONDONTWRITEBYTECODE", "1",
             "--setenv", "OMP_NUM_THREADS", "1", "--"]
    if root and slot is not None:
        uid = str(SLOT_UID_BASE + slot)
        args += [shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={uid}", f"--regid={uid}",
                 "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"]
    return args + (["/bin/true"] if probe else [sys.executable, "-I", "-"])


def _limits_fn(limits: ProgramLimits, nproc: int | None):
    """The rlimits set in the child before it execs. RLIMIT_NPROC only where the program has a uid
    of its own (bwrap as root): elsewhere it counts the user's every process."""
    mb = 1024 ** 2

    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (limits.memory_mb * mb,) * 2)
        cpu = int(limits.timeout_s) + 1
        resource.setrlimit(resource.RLIMIT_CPU, (cpu, cpu))
        resource.setrlimit(resource.RLIMIT_FSIZE, (limits.max_file_mb * mb,) * 2)
        resource.setrlimit(resource.RLIMIT_NOFILE, (limits.max_open_files,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        if nproc is not None:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))

    return apply


def _run(argv: list[str], stdin: IO[bytes], limits: ProgramLimits, cwd: str | None, how: str) -> ProgramResult:
    # as root in bwrap, the process cap is the slot uid's; bwrap itself (still root) forks past it
    nproc = limits.max_processes if (how == "bwrap" and os.geteuid() == 0) else None
    env = {"PATH": "/usr/bin:/bin", "HOME": cwd or "/tmp", "LANG": "C.UTF-8", "PYTHONDONTWRITEBYTECODE": "1",
           "OMP_NUM_THREADS": "1"}
    t0 = time.monotonic()
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        proc = subprocess.Popen(argv, stdin=stdin, stdout=out, stderr=err, cwd=cwd, env=env,
                                preexec_fn=_limits_fn(limits, nproc), start_new_session=True)
        timed_out = False
        try:
            proc.wait(timeout=limits.timeout_s)
        except subprocess.TimeoutExpired:
            timed_out = True
        finally:  # the whole session: bwrap's death takes its PID namespace down; unsandboxed, the group
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        seconds = time.monotonic() - t0
        return ProgramResult(proc.returncode, _tail(out, limits.output_bytes), _tail(err, limits.output_bytes),
                             round(seconds, 3), timed_out, how)


def _tail(f: IO[bytes], limit: int) -> str:
    size = f.seek(0, os.SEEK_END)
    f.seek(max(0, size - limit))
    return f.read(limit).decode("utf-8", "replace")


@contextlib.contextmanager
def _slot() -> Iterator[int]:
    """A slot no other program holds now, in this process or another: an flock on its file in a
    root-only folder. Tried from a random start; when every slot is busy, wait for one."""
    folder = Path(tempfile.gettempdir()) / f"rlbench-program-slots-{os.geteuid()}"
    folder.mkdir(mode=0o700, exist_ok=True)
    st = folder.lstat()
    if not os.path.isdir(folder) or folder.is_symlink() or st.st_uid != os.geteuid():
        raise SandboxUnavailable(f"{folder} is not a folder of this user's: cannot hold a program slot")
    start = random.randrange(SLOTS)
    order = [(start + i) % SLOTS for i in range(SLOTS)]
    for blocking in (False, True):
        for k in order:
            fd = os.open(folder / f"{k}.lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
            except BlockingIOError:
                os.close(fd)
                continue
            try:
                yield k
                return
            finally:
                fcntl.flock(fd, fcntl.LOCK_UN)
                os.close(fd)


__all__ = ["ProgramLimits", "ProgramResult", "SandboxUnavailable", "isolation", "run_many", "run_python"]
