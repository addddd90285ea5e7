"""CPU seconds of one command's whole process tree, counted where they are spent.

Why this exists: neither the caller's rusage nor a psutil reading of its children sees what a
sandboxed command used. bwrap's outer process exits without reaping the sandbox's init (so none of
the sandbox's CPU reaches the caller's RUSAGE_CHILDREN), and a command's background children are
killed at the end rather than waited for. A 362 s training run showed as 3.5 CPU seconds.

Methods, best first (`meter_method("auto")` picks the first that works here):

- `cgroup-v2`: a cgroup `rlbench/<owner>-<n>` under the process's own cgroup in a writable cgroup2
  hierarchy (`/sys/fs/cgroup` on a unified machine, `/sys/fs/cgroup/unified` on a hybrid one).
  The child joins it in its preexec hook, before exec, so every descendant is born inside with no
  race; the kernel keeps `cpu.stat` usage_usec with or without the cpu controller enabled. Nested
  under our own cgroup, not the root, so the limits of the cgroups above us (a container's, a
  batch job's) still hold for the command.
- `cgroup-v1`: the same in the cpuacct hierarchy (`cpuacct.usage`, nanoseconds).
- `poll`: no writable cgroup (not root, read-only cgroupfs). See PollMeter for what it misses.

After the command, every process left in its cgroup is killed (`cgroup.kill` where the kernel has
it, else SIGKILL to each pid until none is left), the usage is read and the cgroup removed. A
cgroup whose owner process died before it could clean up (a Tune worker stopped mid-trial) is
removed, its processes killed, the next time a meter of this kind is opened.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import os
import re
import signal
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

METHODS = ("auto", "cgroup-v2", "cgroup-v1", "poll")
GROUP_DIR = "rlbench"  # the folder of our cgroups inside the process's own cgroup
POLL_INTERVAL_S = 0.1  # how often the poller reads the processes it knows (a /proc read each)
SCAN_EVERY = 5  # and every so many readings, looks for new ones (a walk over all of /proc)
KILL_WAIT_S = 10.0  # how long a cgroup's killed processes get to exit before it is left for a later prune
_NAME = re.compile(r"^(\d+)-(\d+)-\d+$")  # owner pid, owner start time (clock ticks), serial
_serial = itertools.count(1)


class CommandMeter(Protocol):
    """The CPU meter of one command: `join` runs in the child before exec, `started` in the parent
    once it exists; `live_s` may be read while it runs; `settle` comes once the child is reaped and
    before anything is killed, `kill` ends whatever is left, and `finish` gives the total;
    `discard` instead of all that when the command never started."""

    method: str

    def join(self) -> None: ...

    def started(self, pid: int) -> None: ...

    def live_s(self) -> float: ...

    def settle(self) -> None: ...

    def kill(self) -> None: ...

    def finish(self, reaped_s: float) -> float: ...

    def discard(self) -> None: ...


# cgroups -----------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Hierarchy:
    """A cgroup hierarchy we may write: `own` is our own cgroup's folder in it."""

    version: int  # 1 (cpuacct) or 2
    own: Path

    @property
    def method(self) -> str:
        return f"cgroup-v{self.version}"

    @property
    def usage_file(self) -> str:
        return "cpu.stat" if self.version == 2 else "cpuacct.usage"


def _unescape(field: str) -> str:
    """mountinfo writes a space, tab, newline or backslash in a path as an octal escape."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def parse_mountinfo(text: str) -> list[tuple[str, Path, str, set[str]]]:
    """(fstype, mount point, root of the mount inside its filesystem, super options) of every
    cgroup mount in a /proc/PID/mountinfo text."""
    out = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if not sep or len(fields) < 5 or len(tail) < 3 or tail[0] not in ("cgroup", "cgroup2"):
            continue
        out.append((tail[0], Path(_unescape(fields[4])), _unescape(fields[3]), set(tail[2].split(","))))
    return out


def parse_proc_cgroup(text: str) -> dict[str, str]:
    """Our cgroup path per hierarchy from /proc/PID/cgroup: key '' for the v2 one, else each v1
    controller's name ('cpuacct', 'cpu', ...)."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _, controllers, path = parts
        if not controllers:
            out[""] = path
        for name in controllers.split(","):
            if name:
                out[name] = path
    return out


def _inside(mount: Path, mount_root: str, own: str) -> Path:
    """Our cgroup's folder under a mount whose root is `mount_root` in the hierarchy (a container's
    cgroupfs often shows only its own subtree); the mount itself when our cgroup is not below it."""
    root = mount_root.rstrip("/")
    if own == root or own.startswith(root + "/"):
        return mount / own[len(root):].lstrip("/")
    return mount


def find_hierarchies(mountinfo: str, proc_cgroup: str) -> list[Hierarchy]:
    """The cgroup hierarchies that could account CPU here, v2 first, then v1 cpuacct (not yet
    checked for write access)."""
    own = parse_proc_cgroup(proc_cgroup)
    mounts = parse_mountinfo(mountinfo)
    found: list[Hierarchy] = []
    for fstype, point, root, opts in mounts:
        if fstype == "cgroup2" and "" in own and not any(h.version == 2 for h in found):
            found.append(Hierarchy(2, _inside(point, root, own[""])))
    for fstype, point, root, opts in mounts:
        if fstype == "cgroup" and "cpuacct" in opts and "cpuacct" in own and not any(h.version == 1 for h in found):
            found.append(Hierarchy(1, _inside(point, root, own["cpuacct"])))
    return found


def _start_ticks(pid: int) -> int | None:
    """A process's start time in clock ticks since boot (with its pid, a name no later process
    reuses); None when there is no such process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rpartition(")")[2].split()[19])


def _read_usage_s(path: Path, version: int) -> float:
    if version == 2:
        for line in (path / "cpu.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == "usage_usec":
                return int(value) / 1e6
        raise OSError(f"no usage_usec in {path / 'cpu.stat'}")
    return int((path / "cpuacct.usage").read_text()) / 1e9


def _pids(path: Path) -> list[int]:
    try:
        return [int(x) for x in (path / "cgroup.procs").read_text().split()]
    except (OSError, ValueError):
        return []


def _kill_all(path: Path) -> None:
    """SIGKILL every process in the cgroup (cgroup.kill: at once, forks in flight included)."""
    kill_file = path / "cgroup.kill"
    if kill_file.exists():
        with contextlib.suppress(OSError):
            kill_file.write_text("1")
            return
    for pid in _pids(path):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)


def _remove(path: Path, wait_s: float = KILL_WAIT_S) -> bool:
    """Kill what is left in the cgroup and remove it; False when it would not go (a process stuck
    in the kernel): a later prune tries again."""
    deadline = time.monotonic() + wait_s
    while True:
        _kill_all(path)
        try:
            path.rmdir()
            return True
        except FileNotFoundError:
            return True
        except OSError:  # EBUSY: killed processes still exiting (or new ones forked before the kill)
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.05)


def prune_stale(parent: Path) -> None:
    """Remove our cgroups whose owner process is gone (killed before it could remove them),
    killing whatever still runs in them."""
    try:
        names = [p.name for p in parent.iterdir() if p.is_dir()]
    except OSError:
        return
    for name in names:
        m = _NAME.match(name)
        if m and _start_ticks(int(m.group(1))) != int(m.group(2)):
            _remove(parent / name, wait_s=2.0)


def _make_group(h: Hierarchy) -> Path:
    """A fresh cgroup `rlbench/<pid>-<start>-<n>` under our own; the owner's pid and start time
    in the name let a later prune tell an abandoned cgroup from a live one."""
    me = os.getpid()
    name = f"{me}-{_start_ticks(me) or 0}-{next(_serial)}"
    for _ in range(3):  # the parent may vanish under us if another process pruned it empty
        parent = h.own / GROUP_DIR
        parent.mkdir(exist_ok=True)
        try:
            (parent / name).mkdir()
            return parent / name
        except FileNotFoundError:
            continue
    raise OSError(f"cannot make a cgroup under {h.own / GROUP_DIR}")


class CgroupMeter:
    """One command's cgroup (see the module docstring)."""

    def __init__(self, h: Hierarchy):
        self.method = h.method
        self.version = h.version
        self.path = _make_group(h)
        self._procs = os.fsencode(str(self.path / "cgroup.procs"))
        self._last = 0.0

    def join(self) -> None:
        """In the child, before exec: only os calls, and an error stops the exec (Popen raises
        SubprocessError in the parent, which then falls back to polling)."""
        fd = os.open(self._procs, os.O_WRONLY)
        try:
            os.write(fd, str(os.getpid()).encode())
        finally:
            os.close(fd)

    def started(self, pid: int) -> None:
        pass

    def live_s(self) -> float:
        with contextlib.suppress(OSError, ValueError):
            self._last = max(self._last, _read_usage_s(self.path, self.version))
        return self._last

    def settle(self) -> None:
        pass

    def kill(self) -> None:
        _kill_all(self.path)

    def finish(self, reaped_s: float) -> float:
        """Kill what is left, wait until it is gone (its CPU is final then), read, remove."""
        deadline = time.monotonic() + KILL_WAIT_S
        while _pids(self.path) and time.monotonic() < deadline:
            _kill_all(self.path)
            time.sleep(0.02)
        total = max(self.live_s(), reaped_s)
        _remove(self.path)
        with contextlib.suppress(OSError):  # empty and unused by another cell: no folder left behind
            self.path.parent.rmdir()
        return total

    def discard(self) -> None:
        """The command never started in it: remove it."""
        _remove(self.path, wait_s=1.0)
        with contextlib.suppress(OSError):
            self.path.parent.rmdir()


# polling --------------------------------------------------------------------------------------
class PollMeter:
    """The fallback without a writable cgroup: a thread reads, every POLL_INTERVAL_S, the user +
    system seconds of every process of the command it knows, keyed by pid and start time (a
    process once seen is read until it is gone, even after it is re-parented), and every
    SCAN_EVERY readings walks the command's process tree for new ones; the total is the sum of
    the last reading of each. The direct child's rusage (`os.wait4`: it and every descendant
    reaped in a chain up to it) is the other estimate; the larger one counts.

    What it misses: a process that lived less than one scan (SCAN_EVERY * POLL_INTERVAL_S) and
    was not reaped by a chain up to the direct child (under bwrap nothing is, since the sandbox's
    init is never reaped by us; nor is a double-forked daemon), one re-parented before it was first
    seen, and for every process the CPU it used between its last reading and its end (up to one
    interval each; a last reading is taken before the leftovers are killed)."""

    method = "poll"

    def __init__(self, interval_s: float = POLL_INTERVAL_S, scan_every: int = SCAN_EVERY):
        self.interval_s, self.scan_every = interval_s, max(1, scan_every)
        self._seen: dict[tuple[int, float], float] = {}
        self._procs: dict[tuple[int, float], Any] = {}  # psutil.Process
        self._root: Any = None
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None

    def join(self) -> None:
        pass

    def started(self, pid: int) -> None:
        import psutil

        with contextlib.suppress(psutil.Error):
            self._root = psutil.Process(pid)
        self.poll()
        self._thread = threading.Thread(target=self._loop, daemon=True, name="rlbench-cpu-poll")
        self._thread.start()

    def _loop(self) -> None:
        for n in itertools.count(1):
            if self._stop.wait(self.interval_s):
                return
            self.poll(scan=n % self.scan_every == 0)

    def poll(self, scan: bool = True) -> None:
        """One reading of every known process; with `scan`, of the whole tree first."""
        import psutil

        root = self._root
        found = []
        if scan and root is not None:
            with contextlib.suppress(psutil.Error):
                found = [root, *root.children(recursive=True)]
        with self._lock:
            for p in found:
                with contextlib.suppress(psutil.Error):
                    self._procs.setdefault((p.pid, p.create_time()), p)
            for key, p in list(self._procs.items()):
                try:
                    if not p.is_running():  # gone, its pid maybe reused
                        raise psutil.NoSuchProcess(key[0])
                    t = p.cpu_times()  # own time only: children are keys of their own
                except psutil.Error:
                    self._procs.pop(key, None)
                    continue
                self._seen[key] = max(self._seen.get(key, 0.0), t.user + t.system)

    def live_s(self) -> float:
        with self._lock:
            return sum(self._seen.values())

    def settle(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.poll()  # the leftovers' last reading, before they are killed

    def kill(self) -> None:
        pass

    def finish(self, reaped_s: float) -> float:
        self._stop.set()
        return max(self.live_s(), reaped_s)

    def discard(self) -> None:
        self._stop.set()


# choosing -------------------------------------------------------------------------------------
def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


@functools.lru_cache(maxsize=None)
def usable_hierarchy(version: int) -> Hierarchy | None:
    """The hierarchy of that cgroup version if we may make cgroups in it and it keeps the usage
    file there, checked once per process with a probe cgroup (removed again); stale cgroups of
    dead owners under it are pruned on the way."""
    for h in find_hierarchies(_read("/proc/self/mountinfo"), _read("/proc/self/cgroup")):
        if h.version != version or not os.access(h.own, os.W_OK):
            continue
        try:
            probe = _make_group(h)
        except OSError:
            return None
        try:
            ok = (probe / h.usage_file).is_file() and (probe / "cgroup.procs").is_file()
            _read_usage_s(probe, h.version)
        except (OSError, ValueError):
            ok = False
        finally:
            _remove(probe, wait_s=1.0)
        prune_stale(h.own / GROUP_DIR)
        with contextlib.suppress(OSError):  # empty: no folder left behind
            (h.own / GROUP_DIR).rmdir()
        return h if ok else None
    return None


def meter_method(wanted: str = "auto") -> str:
    """The method a command is metered with: `wanted` itself when it is available here (poll
    always is), or for "auto" the best available. Raises ValueError for a cgroup method that is
    not available, naming what is."""
    if wanted not in METHODS:
        raise ValueError(f"unknown CPU meter {wanted!r}; allowed: {', '.join(METHODS)}")
    if wanted == "poll":
        return "poll"
    for version in (2, 1):
        if wanted in ("auto", f"cgroup-v{version}") and usable_hierarchy(version) is not None:
            return f"cgroup-v{version}"
    if wanted == "auto":
        return "poll"
    have = [f"cgroup-v{v}" for v in (2, 1) if usable_hierarchy(v) is not None] + ["poll"]
    raise ValueError(f"CPU meter {wanted} is not available here (no writable hierarchy); available: {', '.join(have)}")


def open_meter(method: str) -> CgroupMeter | PollMeter:
    """A meter for one command; a cgroup that cannot be made gives a poller instead."""
    if method.startswith("cgroup-v"):
        h = usable_hierarchy(int(method[-1]))
        if h is not None:
            with contextlib.suppress(OSError):
                return CgroupMeter(h)
    return PollMeter()
