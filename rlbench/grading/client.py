"""`./grade submit PATH [--recipe CMD]`, `./grade sweep DESIGN`, `./grade claim INDEX GAIN LOW HIGH`
and `./grade status` inside a workspace; also the SDK's submit, sweep, claim and status."""

from __future__ import annotations

import json
import os
import socket
import sys
from typing import Any


def request(address: str, payload: dict[str, Any], timeout: float = 3600.0) -> dict[str, Any]:
    """One request to a grading server (the client side; used by `grade`, the SDK and the tools)."""
    if not address:
        return {"ok": False, "error": "no grading server here (RLBENCH_GRADER is not set)"}
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        s.settimeout(timeout)
        try:
            s.connect(address)
        except OSError as exc:
            return {"ok": False, "error": f"cannot reach the grading server at {address}: {exc}"}
        data = b""
        try:  # a server that refuses (too many connections) answers one line and closes: read what came
            s.sendall((json.dumps(payload) + "\n").encode())
        except OSError:
            pass
        try:
            while not data.endswith(b"\n"):
                chunk = s.recv(65536)
                if not chunk:
                    break
                data += chunk
        except OSError as exc:
            if not data:
                return {"ok": False, "error": f"the grading server did not answer: {type(exc).__name__}: {exc}"}
    try:
        return json.loads(data)
    except json.JSONDecodeError:
        return {"ok": False, "error": "the grading server sent no answer"}


def address() -> str:
    return os.environ.get("RLBENCH_GRADER", "")


def submit(path: str, recipe: str = "") -> dict[str, Any]:
    """Submit a checkpoint folder; relative paths are taken from the current directory. `recipe`:
    the command that made it, run from the workspace (`{seed}` in it is replaced by each rerun's
    seed), so the robustness stage can rerun it from the base model."""
    payload = {"op": "submit", "path": os.path.abspath(path)}
    if recipe:
        payload["recipe"] = recipe
    return request(address(), payload)


def sweep(path: str) -> dict[str, Any]:
    """Submit a design file (YAML or JSON); returns when the sweep has finished."""
    return request(address(), {"op": "sweep", "path": os.path.abspath(path)}, timeout=24 * 3600)


def claim(index: int, test_gain: float, ci: tuple[float, float]) -> dict[str, Any]:
    """Claim submission `index`'s absolute test gain over the base model (fractions: 0.12 is +12
    points) with a 95% interval; evaluate tasks score the claim against the harness's measurement."""
    return request(address(), {"op": "claim", "index": int(index), "test_gain": float(test_gain),
                               "ci": [float(ci[0]), float(ci[1])]}, timeout=30)


def status() -> dict[str, Any]:
    return request(address(), {"op": "status"}, timeout=30)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["status"] and len(args) == 1:
        reply = status()
    elif args[:1] == ["submit"] and len(args) == 2:
        reply = submit(args[1])
    elif args[:1] == ["submit"] and len(args) == 4 and args[2] == "--recipe":
        reply = submit(args[1], args[3])
    elif args[:1] == ["sweep"] and len(args) == 2:
        reply = sweep(args[1])
    elif args[:1] == ["claim"] and len(args) == 5:
        try:
            reply = claim(int(args[1]), float(args[2]), (float(args[3]), float(args[4])))
        except ValueError:
            reply = {"ok": False, "error": "grade claim INDEX GAIN LOW HIGH: an integer and three numbers"}
    else:
        print("usage: grade submit CHECKPOINT_DIR [--recipe COMMAND] | grade sweep DESIGN.yaml | "
              "grade claim INDEX GAIN LOW HIGH | grade reward FILE.jsonl | grade status", file=sys.stderr)
        raise SystemExit(2)
    print(json.dumps(reply, indent=2))
    raise SystemExit(0 if reply.get("ok") else 1)
