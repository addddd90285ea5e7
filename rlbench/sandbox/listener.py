"""Unix-socket servers the harness runs for the sandbox (the grading server, the egress proxy):
every connection is hostile until its request arrives.

An agent can open thousands of idle connections from inside the sandbox; each used to hold a
thread and a descriptor in the harness's process, and ~22,000 killed a cell with EMFILE. So a
server here admits at most `max_connections` at once per pool of peers (answering the rest with
one error line and closing them at once, with no thread), gives a request `read_timeout_s` to
arrive under one deadline, and keeps accepting after running out of descriptors.
"""

from __future__ import annotations

import errno
import os
import socket
import socketserver
import struct
import threading
import time
from typing import Any

MAX_REQUEST = 64 * 1024
MAX_CONNECTIONS = 32  # open at once per kind of peer (the harness's tools; the sandbox): over it, closed at once
READ_TIMEOUT_S = 5.0  # the whole request must arrive within this, or the connection is closed
_OUT_OF_FDS = (errno.EMFILE, errno.ENFILE, errno.ENOBUFS, errno.ENOMEM)


class ConnectionGate:
    """Bounds what connections may cost the harness: the sandbox is an adversary that can open
    thousands of idle connections (each held a thread and a descriptor in the cell's process, and
    ~22,000 killed it with EMFILE). Peers are counted in two pools, the harness's own processes
    (`trusted` pids, e.g. the agent host whose tools call the grader) and everyone else (the
    sandbox), so a flood from the sandbox never locks the harness's own calls out. The counters
    go into the cell's result and its integrity verdict."""

    def __init__(self, max_connections: int = MAX_CONNECTIONS, read_timeout_s: float = READ_TIMEOUT_S):
        self.max_connections = max_connections
        self.read_timeout_s = read_timeout_s
        self.trusted: set[int] = {os.getpid()}
        self.open = {"harness": 0, "sandbox": 0}
        self.peak = {"harness": 0, "sandbox": 0}
        self.refused = 0  # over the cap: answered with an error line and closed at once
        self.timed_out = 0  # no complete request line within READ_TIMEOUT_S
        self.accept_errors = 0  # accept() failed for want of descriptors or memory
        self._pools: dict[int, str] = {}  # id() of an admitted connection -> its pool
        self._lock = threading.Lock()

    def pool(self, conn: socket.socket) -> str:
        """Which pool a peer belongs to, from the kernel's record of who connected (SO_PEERCRED:
        the peer cannot forge it)."""
        try:
            pid, _, _ = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                                            struct.calcsize("3i")))
        except OSError:
            return "sandbox"
        return "harness" if pid in self.trusted else "sandbox"

    def enter(self, conn: socket.socket) -> bool:
        """Admit a new connection, or refuse it (the caller closes it) when its pool is full."""
        pool = self.pool(conn)
        with self._lock:
            if self.open[pool] >= self.max_connections:
                self.refused += 1
                admitted = False
            else:
                self.open[pool] += 1
                self.peak[pool] = max(self.peak[pool], self.open[pool])
                self._pools[id(conn)] = pool
                admitted = True
        if not admitted:
            try:  # a well-meaning client learns why; never blocks the accept loop
                conn.send(b'{"ok": false, "error": "too many open connections to the grading server; '
                          b'close some and retry"}\n', socket.MSG_DONTWAIT)
            except OSError:
                pass
        return admitted

    def note_timeout(self) -> None:
        with self._lock:
            self.timed_out += 1

    def leave(self, conn: socket.socket) -> None:
        with self._lock:
            pool = self._pools.pop(id(conn), None)
            if pool is not None:
                self.open[pool] -= 1

    def summary(self) -> dict[str, Any]:
        with self._lock:
            return {"max_connections": self.max_connections, "read_timeout_s": self.read_timeout_s,
                    "refused_connections": self.refused, "timed_out_connections": self.timed_out,
                    "accept_errors": self.accept_errors, "peak_connections": dict(self.peak)}


class GatedUnixServer(socketserver.ThreadingUnixStreamServer):
    """The unix-socket server with the gate in front of its threads, and an accept loop that
    outlives running out of descriptors (it pauses, then serves later connections)."""

    daemon_threads = True
    request_queue_size = 64

    def __init__(self, path: str, handler: type[socketserver.BaseRequestHandler], gate: ConnectionGate):
        self.gate = gate
        super().__init__(path, handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        try:
            return super().get_request()
        except OSError as exc:  # socketserver drops the failed accept and polls again
            if exc.errno in _OUT_OF_FDS:
                self.gate.accept_errors += 1
                time.sleep(0.05)  # the listener stays readable meanwhile: do not spin on it
            raise

    def verify_request(self, request: Any, client_address: Any) -> bool:
        return self.gate.enter(request)

    def process_request(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request(request, client_address)
        except BaseException:  # no thread could start: give the slot back (socketserver closes the connection)
            self.gate.leave(request)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self.gate.leave(request)


def read_until(conn: socket.socket, end: bytes, timeout_s: float = READ_TIMEOUT_S, limit: int = MAX_REQUEST) -> bytes | None:
    """Bytes from `conn` until `end` has arrived (or `limit` bytes, or the peer closed), read under
    one deadline for the whole (a per-read timeout would let a peer hold the connection by sending
    a byte every few seconds); None when the deadline passed first."""
    deadline = time.monotonic() + timeout_s
    # appended in place and searched only where `end` can newly appear: linear in the request's
    # size (with a limit of megabytes, `bytes +=` and `end in data` were quadratic)
    data = bytearray()
    while len(data) < limit:
        left = deadline - time.monotonic()
        if left <= 0:
            return None
        conn.settimeout(left)
        try:
            chunk = conn.recv(min(65536, limit - len(data)))
        except (socket.timeout, TimeoutError):
            return None
        if not chunk:
            break
        seen = max(0, len(data) - len(end) + 1)
        data += chunk
        if data.find(end, seen) >= 0:
            break
    return bytes(data)


def read_request_line(conn: socket.socket, timeout_s: float = READ_TIMEOUT_S, limit: int = MAX_REQUEST) -> bytes | None:
    """One JSON request line (what follows the first newline is ignored: one request per
    connection); None when it did not arrive in time."""
    data = read_until(conn, b"\n", timeout_s, limit)
    return None if data is None else data.split(b"\n", 1)[0][:limit]
