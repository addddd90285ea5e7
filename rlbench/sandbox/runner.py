"""Run one agent command under bubblewrap, with limits, a wall clock and a disk quota.

What the command sees (bwrap mode): the system (`/usr`, `/etc`) read-only, the Python install, the
virtualenv and the project's two importable packages (`rlbench`, `reference_pipelines`) read-only,
the workspace read-write at `/workspace`, a private `/tmp`, and the grading socket. Not there: the
task folders (their data seeds would regenerate hidden splits), `RLBENCH_HOME` (hidden splits, zoo
builds, grader state), other cells, the network (`--unshare-net`: loopback only). It runs as an
unprivileged uid (65534) when the harness is root, because the kernel never applies RLIMIT_NPROC to
root and a fork bomb must hit a ceiling (bwrap itself runs as root then, so it can bind a Python
that lives under a 0700 /root, and `setpriv` drops to 65534 inside; as a normal user bwrap runs
unprivileged in a user namespace and the user's own uid carries the limit); memory (RLIMIT_AS), file size,
process count, CPU time and open files (RLIMIT_NOFILE, against a socket flood at the grader) are rlimits
inherited through bwrap. The wall clock kills the whole sandbox: bwrap's `--die-with-parent` and its
own PID namespace take every descendant down with it.

`mode=none` runs the same command directly on the host, with the same rlimits and clock but no
isolation; the harness marks every result it produces as unsandboxed.

Every command's CPU seconds, its whole process tree's, are metered where they are spent
(rlbench/sandbox/accounting.py: a cgroup per command, or a poller where no cgroup is writable);
`Sandbox.cpu_used_s` is the running total the cell's compute meter reads.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Callable, Mapping, Sequence

from rlbench.config.core import check
from rlbench.sandbox.accounting import METHODS, CgroupMeter, PollMeter, meter_method, open_meter
from rlbench.sandbox.gpus import Gpu, cell_gpus, device_binds
from rlbench.sandbox.ownership import SANDBOX_UID

INSIDE_WORKSPACE = "/workspace"
INSIDE_GRADER = "/run/rlbench/grader.sock"


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot start here; the message says what to do."""


@dataclass
class SandboxConfig:
    mode: str = "bwrap"  # bwrap | none (none: no isolation, results marked unsandboxed)
    memory_gb: float = 8.0  # address space per process
    max_processes: int = 512  # per sandbox uid (threads count too: torch and tokenizers start some)
    max_open_files: int = 4096  # descriptors per process (RLIMIT_NOFILE): bounds a socket flood from each one
    max_file_gb: float = 2.0  # largest single file
    disk_gb: float = 4.0  # the whole workspace, watched while a command runs
    cpu_seconds: int = 0  # per process; 0: the cell's budget times its cpus
    tmp_mb: int = 1024  # the private /tmp
    threads: int = 2  # OMP/torch threads inside
    output_bytes: int = 20_000  # stdout/stderr kept per call (head and tail)
    disk_poll_s: float = 1.0
    extra_env: dict[str, str] = field(default_factory=dict)
    hide: list[str] = field(default_factory=list)  # host paths shown empty inside (bwrap only)
    cpu_meter: str = "auto"  # auto | cgroup-v2 | cgroup-v1 | poll: how commands' CPU seconds are counted

    def validate(self) -> None:
        check(self.mode in ("bwrap", "none"), "sandbox.mode", self.mode, "bwrap, none")
        for path in self.hide:
            check(Path(path).is_absolute() and Path(path).exists(), "sandbox.hide", path, "an existing absolute path")
        check(self.memory_gb > 0, "sandbox.memory_gb", self.memory_gb, "> 0")
        check(self.max_processes >= 16, "sandbox.max_processes", self.max_processes, ">= 16")
        check(self.max_open_files >= 256, "sandbox.max_open_files", self.max_open_files, ">= 256")
        check(self.disk_gb > 0, "sandbox.disk_gb", self.disk_gb, "> 0")
        check(self.cpu_meter in METHODS, "sandbox.cpu_meter", self.cpu_meter, ", ".join(METHODS))


@dataclass
class ExecResult:
    returncode: int
    stdout: str
    stderr: str
    seconds: float
    killed: str = ""  # "" | timeout | disk_quota | budget
    truncated: bool = False
    cpu_s: float = 0.0  # CPU seconds of the command's whole process tree
    cpu_meter: str = ""  # how they were counted: cgroup-v2 | cgroup-v1 | poll

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.killed


def bwrap_path() -> str | None:
    return shutil.which("bwrap")


def require_bwrap() -> None:
    """Refuse before anything starts: a cell asked to be sandboxed never runs open."""
    if bwrap_path() is None:
        raise SandboxUnavailable(
            "bubblewrap (bwrap) is not installed: run `make setup` (it installs the Debian package "
            "`bubblewrap`), or pass sandbox=none to run unsandboxed (every result is then marked so)")


def workspace_host_path(workspace: Path, path: str) -> Path:
    """A path as an agent names it (/workspace/..., relative to the workspace, or a host path) ->
    the host path. Only a mapping: callers decide what lies outside the workspace."""
    if path == INSIDE_WORKSPACE or path.startswith(INSIDE_WORKSPACE + "/"):
        return workspace / path[len(INSIDE_WORKSPACE):].lstrip("/")
    p = Path(path)
    return p if p.is_absolute() else workspace / p


def _keep(data: bytes, limit: int) -> tuple[str, bool]:
    if len(data) <= limit:
        return data.decode("utf-8", "replace"), False
    half = limit // 2
    cut = len(data) - 2 * half
    return (data[:half].decode("utf-8", "replace") + f"\n[... {cut} bytes cut ...]\n"
            + data[-half:].decode("utf-8", "replace")), True


def _keep_file(f: IO[bytes], limit: int) -> tuple[str, bool]:
    """`_keep` of a file's bytes, reading only its head and tail: a command may print gigabytes."""
    f.seek(0, os.SEEK_END)
    size = f.tell()
    f.seek(0)
    if size <= limit:
        return _keep(f.read(), limit)
    half = limit // 2
    head = f.read(half)
    f.seek(size - half)
    return (head.decode("utf-8", "replace") + f"\n[... {size - 2 * half} bytes cut ...]\n"
            + f.read(half).decode("utf-8", "replace")), True


def dir_size(path: Path) -> int:
    total = 0
    stack = [str(path)]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(entry.path)
                        elif entry.is_file(follow_symlinks=False):
                            total += entry.stat(follow_symlinks=False).st_blocks * 512
                    except OSError:
                        continue
        except OSError:
            continue
    return total


def _code_packages() -> list[Path]:
    """The folders of the two packages the SDK imports, as this process imported them."""
    import reference_pipelines
    import rlbench

    return [Path(rlbench.__file__).resolve().parent, Path(reference_pipelines.__file__).resolve().parent]


def code_path() -> str:
    """PYTHONPATH inside the sandbox: the folders holding the harness's own copy of rlbench and
    reference_pipelines, so a command imports exactly that code whichever way it reached this
    machine (an editable install, a checkout elsewhere, Ray's uploaded working_dir), never what
    the virtualenv's install record points at (a folder the sandbox may not mount)."""
    return os.pathsep.join(dict.fromkeys(str(p.parent) for p in _code_packages()))


def _project_mounts() -> list[Path]:
    """The Python install, the virtualenv and the two packages the SDK imports, read-only."""
    paths = [Path(sys.base_prefix), Path(sys.prefix), *_code_packages()]
    out: list[Path] = []
    for p in paths:
        p = p.resolve()
        if not str(p).startswith("/usr/") and p not in out:
            out.append(p)
    return out


def _hide_args(paths: Sequence[str]) -> list[str]:
    """bwrap arguments that mount an empty tmpfs over each folder and /dev/null over each file of
    `paths`, and over a file's compiled copies in `__pycache__` (a .pyc holds every string of its
    source). Built at each command, so a .pyc written since the last one is covered too."""
    args: list[str] = []
    for raw in paths:
        p = Path(raw).resolve()
        if p.is_dir():
            args += ["--tmpfs", str(p)]
        elif p.is_file():
            args += ["--ro-bind", "/dev/null", str(p)]
            if p.suffix == ".py":
                args += [a for pyc in sorted((p.parent / "__pycache__").glob(f"{p.stem}.*.pyc"))
                         for a in ("--ro-bind", "/dev/null", str(pyc))]
    return args


class Sandbox:
    """Runs commands for one cell. `workspace` is the host folder the agent may write."""

    def __init__(self, workspace: Path, cfg: SandboxConfig, cell_budget_s: float, cpus: int = 2,
                 grader_socket: Path | None = None, scratch: Path | None = None, visible_gpus: str | None = None):
        cfg.validate()
        self.workspace = Path(workspace).resolve()
        self.cfg = cfg
        self.grader_socket = grader_socket
        self.cpu_seconds = cfg.cpu_seconds or int(max(60, cell_budget_s) * max(1, cpus))
        self.scratch = Path(scratch or tempfile.mkdtemp(prefix="rlbench-sbx-"))
        self.scratch.mkdir(parents=True, exist_ok=True)
        self.as_root = os.geteuid() == 0
        # the cell's GPUs (`visible_gpus`, else this process's CUDA_VISIBLE_DEVICES), as the driver
        # lists them: only these reach the sandbox (rlbench/sandbox/gpus.py)
        visible = visible_gpus if visible_gpus is not None else os.environ.get("CUDA_VISIBLE_DEVICES")
        self.gpus: list[Gpu] = cell_gpus(visible) if cfg.mode == "bwrap" else []
        self.binds: list[tuple[str, str]] = []  # (host path, path inside): e.g. the egress proxy's socket
        self.ro_binds: list[tuple[str, str]] = []  # read-only: e.g. an installed coding-agent CLI
        try:
            self.cpu_meter = meter_method(cfg.cpu_meter)  # cgroup-v2 | cgroup-v1 | poll
        except ValueError as exc:
            raise SandboxUnavailable(str(exc)) from None
        self._cpu_done = 0.0
        self._in_flight: list[CgroupMeter | PollMeter] = []
        self._cpu_lock = threading.Lock()
        # called about every disk_poll_s while a command runs, and after it, with cpu_used_s
        self.cpu_listener: Callable[[float], None] | None = None
        # read as often: a non-empty answer (why) kills the running command, e.g. a spent CPU budget
        self.stop_check: Callable[[], str] | None = None
        if cfg.mode == "bwrap":
            require_bwrap()
            probe = self.run("true", timeout=30)
            if probe.returncode != 0:
                raise SandboxUnavailable(f"bubblewrap cannot start a sandbox here: {probe.stderr.strip()[-400:]}")

    @property
    def cpu_used_s(self) -> float:
        """CPU seconds of every command run so far, the running ones' included."""
        with self._cpu_lock:
            return self._cpu_done + sum(m.live_s() for m in self._in_flight)

    def _publish_cpu(self) -> None:
        if self.cpu_listener is not None:
            with contextlib.suppress(Exception):  # bookkeeping must never fail a command
                self.cpu_listener(self.cpu_used_s)

    @property
    def sandboxed(self) -> bool:
        return self.cfg.mode == "bwrap"

    @property
    def root(self) -> str:
        """The workspace path as commands see it."""
        return INSIDE_WORKSPACE if self.sandboxed else str(self.workspace)

    def grader_address(self) -> str:
        if self.grader_socket is None:
            return ""
        return INSIDE_GRADER if self.sandboxed else str(self.grader_socket)

    def env(self, extra: Mapping[str, str] | None = None) -> dict[str, str]:
        root = self.root
        env = {
            "PATH": f"{sys.prefix}/bin:/usr/local/bin:/usr/bin:/bin",
            "HOME": root, "TMPDIR": "/tmp" if self.sandboxed else str(self.scratch),
            "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": code_path(),
            "RLBENCH_WORKSPACE": root, "RLBENCH_HOME": f"{root}/.rlbench", "RLBENCH_GRADER": self.grader_address(),
            "RLBENCH_SANDBOX": self.cfg.mode,
            "OMP_NUM_THREADS": str(self.cfg.threads), "MKL_NUM_THREADS": str(self.cfg.threads),
            "TOKENIZERS_PARALLELISM": "false",
            "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
            "HF_HOME": f"{root}/.rlbench/hf", "WANDB_MODE": "offline",
        }
        if self.sandboxed:  # the sandbox's GPUs are its own, numbered from 0 (rlbench/sandbox/gpus.py)
            has_gpu = bool(self.gpus)
        else:  # unsandboxed, commands see what the harness sees
            has_gpu = _cuda_visible()
            if "CUDA_VISIBLE_DEVICES" in os.environ:
                env["CUDA_VISIBLE_DEVICES"] = os.environ["CUDA_VISIBLE_DEVICES"]
        if not has_gpu:
            env["DS_ACCELERATOR"] = "cpu"
        env.update(self.cfg.extra_env)
        env.update(extra or {})
        return env

    def _bwrap_args(self) -> list[str]:
        # as root: no user namespace (setpriv must reach an unmapped uid); otherwise bwrap's own
        unshare = (["--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts", "--unshare-cgroup-try"]
                   if self.as_root else ["--unshare-all"])
        args = [bwrap_path() or "bwrap", *unshare, "--die-with-parent", "--new-session",
                "--hostname", "rlbench-sandbox", "--ro-bind", "/usr", "/usr"]
        for name in ("bin", "lib", "lib64", "sbin"):
            p = Path("/") / name
            if p.is_symlink():
                args += ["--symlink", os.readlink(p), str(p)]
            elif p.is_dir():
                args += ["--ro-bind", str(p), str(p)]
        args += ["--ro-bind", "/etc", "/etc", "--proc", "/proc", "--dev", "/dev",
                 # private, size-capped and writable by the sandbox uid (sticky, like the host's)
                 "--perms", "1777", "--size", str(self.cfg.tmp_mb * 1024 * 1024), "--tmpfs", "/tmp",
                 "--perms", "1777", "--size", str(self.cfg.tmp_mb * 1024 * 1024), "--tmpfs", "/dev/shm"]
        args += device_binds(self.gpus)  # the cell's own GPUs, and no other
        made: set[str] = set()

        def parents(path: str) -> list[str]:  # bwrap would create them 0700 root: unreadable for uid 65534
            out = []
            for parent in reversed(Path(path).parents):
                if str(parent) != "/" and str(parent) not in made:
                    made.add(str(parent))
                    out += ["--perms", "0755", "--dir", str(parent)]
            return out

        for p in _project_mounts():
            args += parents(str(p)) + ["--ro-bind", str(p), str(p)]
        args += _hide_args(self.cfg.hide)
        args += ["--bind", str(self.workspace), INSIDE_WORKSPACE]
        if self.grader_socket is not None:
            args += parents(INSIDE_GRADER) + ["--bind", str(self.grader_socket), INSIDE_GRADER]
        for host, inside in self.binds:
            args += parents(inside) + ["--bind", host, inside]
        for host, inside in self.ro_binds:
            args += parents(inside) + ["--ro-bind", host, inside]
        args += ["--chdir", INSIDE_WORKSPACE]
        return args

    def _preexec(self, memory_gb: float | None = None) -> None:
        gb = 1024 ** 3
        resource.setrlimit(resource.RLIMIT_AS, (int((memory_gb or self.cfg.memory_gb) * gb),) * 2)
        resource.setrlimit(resource.RLIMIT_FSIZE, (int(self.cfg.max_file_gb * gb),) * 2)
        resource.setrlimit(resource.RLIMIT_NPROC, (self.cfg.max_processes,) * 2)
        resource.setrlimit(resource.RLIMIT_CPU, (self.cpu_seconds,) * 2)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
        hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]  # never above the harness's own ceiling
        files = self.cfg.max_open_files if hard == resource.RLIM_INFINITY else min(self.cfg.max_open_files, hard)
        resource.setrlimit(resource.RLIMIT_NOFILE, (files, files))

    def run(self, command: str | Sequence[str], timeout: float, env: Mapping[str, str] | None = None,
            stdout_path: Path | None = None, memory_gb: float | None = None) -> ExecResult:
        """Run `command` (a shell string, or an argv list) until it exits or `timeout` seconds pass.

        `stdout_path`: a harness file (never in the workspace) that receives the whole stdout, e.g. a
        CLI agent's event stream, read while it runs; the result still holds its head and tail.
        `memory_gb`: this command's address-space limit instead of the sandbox's."""
        quota = int(self.cfg.disk_gb * 1024 ** 3)  # over it, the command is killed (an `rm` is quick enough)
        argv = ["/bin/bash", "-c", command] if isinstance(command, str) else list(command)
        if self.sandboxed:
            drop = ([shutil.which("setpriv") or "/usr/bin/setpriv", f"--reuid={SANDBOX_UID}", f"--regid={SANDBOX_UID}",
                     "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"] if self.as_root else [])
            argv = self._bwrap_args() + ["--"] + drop + argv
        out_f = open(stdout_path, "w+b") if stdout_path is not None else tempfile.TemporaryFile(dir=self.scratch)
        err_f = tempfile.TemporaryFile(dir=self.scratch)
        t0 = time.monotonic()
        try:
            proc, meter = self._start(argv, env, out_f, err_f, memory_gb)
        except (OSError, subprocess.SubprocessError) as exc:
            out_f.close()
            err_f.close()
            return ExecResult(127, "", f"cannot start: {exc}", time.monotonic() - t0, cpu_meter=self.cpu_meter)
        with self._cpu_lock:
            self._in_flight.append(meter)
        meter.started(proc.pid)
        reaper = _Reaper(proc)
        done = threading.Event()
        reason: list[tuple[str, str]] = []  # (killed, why)

        def watch() -> None:
            while not done.wait(self.cfg.disk_poll_s):
                if dir_size(self.workspace) > quota:
                    reason.append(("disk_quota", ""))
                elif why := self._stop_reason():
                    reason.append(("budget", why))
                else:
                    self._publish_cpu()
                    continue
                _kill(proc, meter)
                return

        watcher = threading.Thread(target=watch, daemon=True)
        watcher.start()
        try:
            if not reaper.wait(max(0.0, timeout)):
                reason.append(("timeout", ""))
                _kill(proc, meter)
                reaper.wait()
        finally:
            done.set()
            watcher.join(timeout=5)
            meter.settle()  # the poller's last reading of the leftovers, before they are killed
            _kill(proc, meter)  # anything the command left behind, in its session or its cgroup
            cpu_s = meter.finish(reaper.rusage_s)
            with self._cpu_lock:
                self._in_flight.remove(meter)
                self._cpu_done += cpu_s
            self._publish_cpu()
        if not reason and dir_size(self.workspace) > quota:  # grew past the quota between two polls
            reason.append(("disk_quota", ""))
        killed, why = reason[0] if reason else ("", "")
        limit = self.cfg.output_bytes
        stdout, t1 = _keep_file(out_f, limit)
        stderr, t2 = _keep_file(err_f, limit)
        out_f.close()
        err_f.close()
        if killed == "timeout":
            stderr += f"\n[rlbench] killed: the command ran past its time limit ({timeout:.0f} s)"
        elif killed == "disk_quota":
            stderr += f"\n[rlbench] killed: the workspace grew past its disk quota ({self.cfg.disk_gb:g} GB)"
        elif killed == "budget":
            stderr += f"\n[rlbench] killed: {why}"
        return ExecResult(proc.returncode if proc.returncode is not None else -9, stdout, stderr,
                          time.monotonic() - t0, killed, t1 or t2, round(cpu_s, 3), meter.method)

    def _start(self, argv: list[str], env: Mapping[str, str] | None, out_f: IO[bytes],
               err_f: IO[bytes], memory_gb: float | None = None) -> tuple[subprocess.Popen, CgroupMeter | PollMeter]:
        """Start the command with its CPU meter. The child joins the meter's cgroup before exec; if
        it cannot (a cgroupfs that refuses us after all), nothing has run, and this command and the
        next ones are polled instead."""
        meter = open_meter(self.cpu_meter)
        if isinstance(meter, PollMeter):
            self.cpu_meter = "poll"

        def limits() -> None:
            self._preexec(memory_gb)

        def preexec() -> None:
            meter.join()
            limits()

        def popen(hook: Callable[[], None]) -> subprocess.Popen:
            return subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out_f, stderr=err_f, cwd=str(self.workspace),
                                    env=self.env(env), preexec_fn=hook, start_new_session=True)

        try:
            return popen(preexec), meter
        except subprocess.SubprocessError:
            meter.discard()
            if isinstance(meter, PollMeter):
                raise
        except OSError:
            meter.discard()
            raise
        self.cpu_meter = "poll"
        meter = PollMeter()
        return popen(limits), meter

    def _stop_reason(self) -> str:
        if self.stop_check is None:
            return ""
        try:
            return self.stop_check() or ""
        except Exception:  # noqa: BLE001 - a check that fails stops nothing
            return ""


class _Reaper:
    """Waits for the command's direct child with os.wait4, which Popen.wait does not: its rusage
    (the child and every descendant reaped in a chain up to it) is the poller's second estimate.
    Sets the Popen's returncode, so Popen never waits for it itself."""

    def __init__(self, proc: subprocess.Popen):
        self.proc = proc
        self.rusage_s = 0.0
        self._done = threading.Event()
        threading.Thread(target=self._wait, daemon=True, name="rlbench-reaper").start()

    def _wait(self) -> None:
        try:
            _, status, usage = os.wait4(self.proc.pid, 0)
            self.rusage_s = usage.ru_utime + usage.ru_stime
            self.proc.returncode = os.waitstatus_to_exitcode(status)
        except ChildProcessError:  # reaped elsewhere (SIGCHLD ignored): like Popen, the status is lost
            self.proc.returncode = 0
        finally:
            self._done.set()

    def wait(self, timeout: float | None = None) -> bool:
        """True once the child is reaped; False when `timeout` passed first."""
        return self._done.wait(timeout)


def _kill(proc: subprocess.Popen, meter: CgroupMeter | PollMeter) -> None:
    _kill_group(proc)
    meter.kill()


def _kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):  # already gone
        os.killpg(proc.pid, signal.SIGKILL)


def _cuda_visible() -> bool:
    try:
        import torch

        return torch.cuda.is_available()
    except Exception:  # noqa: BLE001 - no torch, no CUDA
        return False
