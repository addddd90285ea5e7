"""`./grade submit PATH` and `./grade status` inside a workspace; also the SDK's submit/status."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from rlbench.grading.server import request


def address() -> str:
    return os.environ.get("RLBENCH_GRADER", "")


def submit(path: str) -> dict[str, Any]:
    """Submit a checkpoint folder; relative paths are taken from the current directory."""
    return request(address(), {"op": "submit", "path": os.path.abspath(path)})


def status() -> dict[str, Any]:
    return request(address(), {"op": "status"}, timeout=30)


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["status"] and len(args) == 1:
        reply = status()
    elif args[:1] == ["submit"] and len(args) == 2:
        reply = submit(args[1])
    else:
        print("usage: grade submit CHECKPOINT_DIR | grade status", file=sys.stderr)
        raise SystemExit(2)
    print(json.dumps(reply, indent=2))
    raise SystemExit(0 if reply.get("ok") else 1)
