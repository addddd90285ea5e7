"""The sandbox's only way out, when a cell allows one: an HTTP proxy that reaches listed endpoints.

An external CLI agent must talk to its LLM, but the sandbox has no network. The harness runs this
proxy outside the sandbox on a unix socket bound into it; inside, `bridge` listens on the
sandbox's own loopback and pipes each connection to that socket, and HTTP(S)_PROXY point at it.
The proxy accepts `CONNECT host:port` (HTTPS) and absolute-URI HTTP requests, and only for the
`host:port` pairs in its allow list; everything else gets 403. Every connection, allowed or
refused, is appended to `egress.jsonl` in the cell folder.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import socket
import socketserver
import sys
import threading
from pathlib import Path
from typing import Iterable
from urllib.parse import urlsplit

from rlbench.io import utc_now
from rlbench.sandbox.listener import ConnectionGate, GatedUnixServer, read_until

INSIDE_EGRESS = "/run/rlbench/egress.sock"
MAX_TUNNELS = 64  # connections through the proxy at once (an LLM client keeps a few open)
HEAD_TIMEOUT_S = 10.0
BRIDGE_PORT = 18080
BRIDGE_READY = "/tmp/.rlbench-egress-ready"  # in the sandbox's private /tmp: made anew by each command


def bridge_prefix() -> str:
    """The shell prefix that starts the bridge in the background, with the harness's own Python (a
    command's PATH may lead to another), and waits (up to 20 s) until it listens."""
    return (f"({shlex.quote(sys.executable)} -m rlbench.sandbox.egress {BRIDGE_PORT} {INSIDE_EGRESS} {BRIDGE_READY} >/dev/null 2>&1 &) ; "
            f"for _i in $(seq 200); do [ -e {BRIDGE_READY} ] && break; sleep 0.1; done ; ")


def _pipe(a: socket.socket, b: socket.socket) -> None:
    def one_way(src: socket.socket, dst: socket.socket) -> None:
        with contextlib.suppress(OSError):  # either side hanging up ends the pipe
            while chunk := src.recv(65536):
                dst.sendall(chunk)
        for s in (src, dst):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)

    t = threading.Thread(target=one_way, args=(b, a), daemon=True)
    t.start()
    one_way(a, b)
    t.join(timeout=60)


class EgressProxy:
    def __init__(self, socket_path: Path, allow: Iterable[str], log: Path):
        self.socket_path, self.log = Path(socket_path), Path(log)
        self.allow = {a.strip().lower() for a in allow if a.strip()}
        self._lock = threading.Lock()
        proxy = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                proxy._serve(self.request)

        # the sandbox may flood the proxy like the grader: capped, and a request head is due in time
        self.gate = ConnectionGate(max_connections=MAX_TUNNELS, read_timeout_s=HEAD_TIMEOUT_S)
        self._server = GatedUnixServer(str(self.socket_path), Handler, self.gate)
        os.chmod(self.socket_path, 0o666)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> "EgressProxy":
        self._thread.start()
        return self

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _record(self, **entry: object) -> None:
        with self._lock, open(self.log, "a") as f:
            f.write(json.dumps({"time": utc_now(), **entry}) + "\n")

    def _serve(self, client: socket.socket) -> None:
        head = read_until(client, b"\r\n\r\n", self.gate.read_timeout_s, 65536)
        if head is None:
            self.gate.note_timeout()
            return
        if b"\r\n\r\n" not in head:
            return  # closed or over the limit before the head ended
        client.settimeout(None)
        line = head.split(b"\r\n", 1)[0].decode("latin-1")
        parts = line.split()
        if len(parts) != 3:
            client.sendall(b"HTTP/1.1 400 Bad Request\r\n\r\n")
            return
        method, target, version = parts
        if method == "CONNECT":
            host, _, port = target.rpartition(":")
            rest = head.split(b"\r\n\r\n", 1)[1]
        else:
            url = urlsplit(target)
            host, port = url.hostname or "", str(url.port or (443 if url.scheme == "https" else 80))
            path = (url.path or "/") + (f"?{url.query}" if url.query else "")
            rest = head.replace(target.encode("latin-1"), path.encode("latin-1"), 1)
        endpoint = f"{host.strip('[]').lower()}:{port}"
        if endpoint not in self.allow:
            self._record(endpoint=endpoint, method=method, allowed=False)
            client.sendall(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        try:
            upstream = socket.create_connection((host.strip("[]"), int(port)), timeout=30)
        except OSError as exc:
            self._record(endpoint=endpoint, method=method, allowed=True, error=str(exc))
            client.sendall(b"HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
            return
        self._record(endpoint=endpoint, method=method, allowed=True)
        upstream.settimeout(None)
        with upstream:
            if method == "CONNECT":
                client.sendall(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            if rest:
                upstream.sendall(rest)
            _pipe(client, upstream)


def bridge(port: int, unix_path: str, ready: str = "") -> None:
    """Inside the sandbox: 127.0.0.1:port -> the egress proxy's unix socket, one pipe per connection.
    `ready`: a file made once it listens, which the command waits for (its first request would
    otherwise race the bridge's start: refused on a busy machine)."""
    server = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind(("127.0.0.1", port))
    server.listen(64)
    if ready:
        Path(ready).touch()
    while True:
        conn, _ = server.accept()

        def serve(conn: socket.socket = conn) -> None:
            with conn, socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as up:
                try:
                    up.connect(unix_path)
                except OSError:
                    return
                _pipe(conn, up)

        threading.Thread(target=serve, daemon=True).start()


if __name__ == "__main__":  # python -m rlbench.sandbox.egress PORT UNIX_SOCKET [READY_FILE]
    bridge(int(sys.argv[1]), sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "")
