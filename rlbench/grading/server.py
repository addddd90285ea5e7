"""The grading server: outside the sandbox, reachable from inside only through a unix socket.

It holds the cell's clock and submission count, validates each submitted checkpoint on a copy it
owns, scores it on the dev split (the only figure an agent ever gets back), and appends every
attempt to `submissions.jsonl` in the cell folder, which the agent cannot reach. One request per
connection, one JSON line each way:

    {"op": "submit", "path": "/workspace/runs/grpo/final"}  ->  {"ok": true, "index": 1, "dev": 0.41, ...}
    {"op": "status"}                                         ->  {"budget_s": 1200, "used_s": 73.2, ...}
                                                                (with a CPU/GPU limit: "compute", "compute_limits")
    {"op": "sweep", "path": "/workspace/design.yaml"}        ->  {"ok": true, "best": {...}, "trials": [...]}
    {"op": "reward", "ids": [...], "completions": [...]}     ->  {"ok": true, "rewards": [...], "queries_left": N}
    {"op": "claim", "index": 2, "test_gain": 0.1, "ci": [0.07, 0.13]}  ->  {"ok": true}

Every connection is hostile until its request arrives (rlbench/sandbox/listener.py): at most
MAX_CONNECTIONS open at once from the sandbox (and as many from the harness's own tools), the rest
answered with an error and closed at once, the request line due within READ_TIMEOUT_S and at most
`max_request_bytes` long (64 KiB, more for the reward endpoint of a task with long completions);
the counts go into the cell's result.

`reward` exists on tasks whose answers the agent never sees (rlbench/grading/rewards.py); `claim`
records the agent's own estimate of a submission's test gain, scored on evaluate tasks.

A submission may carry a recipe, the command that made it (`grade submit DIR --recipe "python
train.py seed={seed}"`); the best checkpoint of a sweep carries its trial's command by itself. At
each submission the server commits the workspace's code (no weights) to a repository of its own in
the cell folder: the robustness stage reruns the recipe on that code, from the base model.
"""

from __future__ import annotations

import json
import os
import shutil
import socketserver
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable

from rlbench import safefs
from rlbench.grading.validate import validate_checkpoint
from rlbench.record import SnapshotError, Snapshots
from rlbench.io import atomic_write_json, utc_now
from rlbench.sandbox.listener import MAX_REQUEST, ConnectionGate, GatedUnixServer, read_request_line
from rlbench.sandbox.runner import INSIDE_WORKSPACE, workspace_host_path

WRITE_TIMEOUT_S = 30.0  # a reply the peer does not read within this is dropped


class GradingServer:
    def __init__(self, cell_dir: Path, workspace: Path, base_model: Path, budget_s: float, max_submissions: int,
                 dev_score: Callable[[str], dict[str, Any]] | None, max_checkpoint_bytes: int = 2 * 1024 ** 3,
                 on_event: Callable[[str], None] | None = None,
                 sweep: Callable[[Path, int], dict[str, Any]] | None = None, max_sweeps: int = 0,
                 rewards: Any = None, compute: Callable[[], dict[str, Any]] | None = None):
        self.cell_dir = Path(cell_dir)
        self.workspace = Path(workspace).resolve()
        self.base_model = Path(base_model)
        self.budget_s = float(budget_s)
        self.max_submissions = max_submissions
        self.dev_score = dev_score
        self.max_bytes = max_checkpoint_bytes
        self.on_event = on_event or (lambda msg: None)
        self.started = time.monotonic()
        self.submissions: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self.sweep_fn = sweep
        self.max_sweeps = max_sweeps if sweep else 0
        self.sweeps: list[dict[str, Any]] = []
        self._sweep_lock = threading.Lock()
        self.sweeping = ""  # the design being swept now, for progress lines
        self.rewards = rewards  # a RewardService, or None: the task has no reward endpoint
        # the longest request line read: the reward endpoint's follows the task's completion
        # length (rlbench/rewards/sizes.py, never under the listener's MAX_REQUEST), the rest is small
        self.max_request_bytes = max(MAX_REQUEST, int(getattr(rewards, "max_request_bytes", 0)))
        self.compute = compute  # the agent's compute so far (rlbench/sandbox/compute.py), stamped on submissions
        self.compute_limits: dict[str, float] = {}  # cpu_seconds / gpu_seconds the cell allows (absent: none)
        self.spent_reason = ""  # set when a CPU or GPU limit passed: the budget is spent from then on
        self.recipes: dict[str, str] = {}  # host path of a sweep's best checkpoint -> its trial command
        self._code: Snapshots | None = None
        self.log = self.cell_dir / "submissions.jsonl"
        # unix socket paths are limited to ~107 bytes, so the socket lives in a short private folder
        self._sock_dir = Path(tempfile.mkdtemp(prefix="rlbg-"))
        os.chmod(self._sock_dir, 0o755)
        self.socket_path = self._sock_dir / "grader.sock"
        server = self

        class Handler(socketserver.BaseRequestHandler):
            def handle(self) -> None:
                line = read_request_line(self.request, server.gate.read_timeout_s, server.max_request_bytes)
                if line is None:  # idle or slow: its slot goes back to the pool
                    server.gate.note_timeout()
                    return
                if not line.strip():  # connected and closed without a word
                    return
                try:
                    if len(line) >= server.max_request_bytes:  # no newline within the cap: cut, not a request
                        reply = {"ok": False, "error": f"request line over {server.max_request_bytes} bytes; "
                                                       "send fewer or shorter completions per request"}
                    else:
                        request = json.loads(line)
                        reply = server.handle(request if isinstance(request, dict) else {})
                except json.JSONDecodeError:
                    reply = {"ok": False, "error": "send one JSON object per line: {\"op\": \"submit\" | \"status\", ...}"}
                except Exception as exc:  # noqa: BLE001 - the grader must answer, never die
                    reply = {"ok": False, "error": f"grader error: {type(exc).__name__}: {exc}"}
                try:
                    self.request.settimeout(WRITE_TIMEOUT_S)
                    self.request.sendall((json.dumps(reply) + "\n").encode())
                except OSError:  # the peer went away or does not read: nothing more to do for it
                    pass

        self.gate = ConnectionGate()
        self._server = GatedUnixServer(str(self.socket_path), Handler, self.gate)
        os.chmod(self.socket_path, 0o666)  # the sandbox runs as another uid
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def start(self) -> "GradingServer":
        self.started = time.monotonic()
        self._thread.start()
        return self

    def start_clock(self) -> None:
        """The budget counts from now (the agent's process is up), not from the server's start."""
        self.started = time.monotonic()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        shutil.rmtree(self._sock_dir, ignore_errors=True)

    def trust(self, pid: int) -> None:
        """Count `pid`'s connections in the harness's pool (the agent host, whose tools call the
        grader): a flood from the sandbox then never locks the harness's own calls out."""
        self.gate.trusted.add(int(pid))

    def alive(self) -> bool:
        """Whether the accept loop still runs (an agent must never be able to stop it)."""
        return self._thread.is_alive()

    def connections(self) -> dict[str, Any]:
        """What the agent's connections cost the grader: refused over the cap, timed out idle,
        failed accepts, the most open at once; for the cell's result and integrity verdict."""
        return self.gate.summary()

    def used_s(self) -> float:
        return time.monotonic() - self.started

    def remaining_s(self) -> float:
        if self.spent_reason:
            return 0.0
        return max(0.0, self.budget_s - self.used_s())

    def spend(self, reason: str) -> None:
        """End the budget now, before its wall clock does (the agent passed a CPU or GPU limit):
        no more submissions, sweeps, reward queries or claims, and status says why."""
        if not self.spent_reason:
            self.spent_reason = reason
            self.on_event(f"budget spent: {reason}")

    def check_limits(self, sample: dict[str, Any]) -> str:
        """Spend the budget if `sample` (the compute meter's) passed one of compute_limits; the reason, or ''."""
        from rlbench.sandbox.compute import over_limit

        why = over_limit(sample, self.compute_limits.get("cpu_seconds", 0.0), self.compute_limits.get("gpu_seconds", 0.0))
        if why:
            self.spend(why)
        return why

    # requests ---------------------------------------------------------------------------------
    def handle(self, request: dict[str, Any]) -> dict[str, Any]:
        op = request.get("op")
        if op == "status":
            return self.status()
        if op == "submit":
            recipe = request.get("recipe")
            return self.submit(str(request.get("path", "")), str(recipe) if recipe else "")
        if op == "sweep":
            return self.sweep(str(request.get("path", "")))
        if op == "reward":
            if self.rewards is None:
                return {"ok": False, "error": "this task has no reward endpoint: its train items carry answers"}
            if self.remaining_s() <= 0:
                return {"ok": False, "error": "the budget is spent; no more reward queries"}
            return self.rewards.query(request.get("ids"), request.get("completions"))
        if op == "claim":
            return self.claim(request.get("index"), request.get("test_gain"), request.get("ci"))
        return {"ok": False, "error": f"unknown op {op!r}; allowed: submit, status, sweep, reward, claim"}

    def claim(self, index: Any, gain: Any, ci: Any) -> dict[str, Any]:
        """The agent's estimate of submission `index`'s absolute test gain over the base model,
        with its 95% interval; a later claim on the same submission replaces the earlier one."""
        try:
            index, gain = int(index), float(gain)
            lo, hi = (float(ci[0]), float(ci[1])) if ci is not None else (gain, gain)
        except (TypeError, ValueError, IndexError):
            return {"ok": False, "error": "claim needs index (int), test_gain (a number, e.g. 0.12 for +12 points) "
                                          "and ci ([low, high])"}
        if not (lo <= gain <= hi) or not all(-1.0 <= v <= 1.0 for v in (lo, gain, hi)):
            return {"ok": False, "error": "claim: need -1 <= ci low <= test_gain <= ci high <= 1 (gains as fractions)"}
        with self._lock:
            sub = next((s for s in self.submissions if s["index"] == index), None)
            if sub is None or not sub.get("ok"):
                return {"ok": False, "error": f"no valid submission #{index}"}
            if self.remaining_s() <= 0:
                return {"ok": False, "error": "the budget is spent; no more claims"}
            sub["claim"] = {"test_gain": gain, "ci": [lo, hi], "t": round(self.used_s(), 1)}
            with open(self.cell_dir / "claims.jsonl", "a") as f:
                f.write(json.dumps({"index": index, **sub["claim"], "time": utc_now()}) + "\n")
        self.on_event(f"claim on submission {index}: {100 * gain:+.1f} [{100 * lo:+.1f}, {100 * hi:+.1f}]")
        return {"ok": True, "index": index, "claim": sub["claim"]}

    def status(self) -> dict[str, Any]:
        with self._lock:
            subs = [{k: s.get(k) for k in ("index", "ok", "dev", "reason", "t")} for s in self.submissions]
        return {"ok": True, "budget_s": self.budget_s, "used_s": round(self.used_s(), 1),
                "remaining_s": round(self.remaining_s(), 1), "max_submissions": self.max_submissions,
                "max_sweeps": self.max_sweeps, "sweeps_left": self.max_sweeps - len(self.sweeps),
                "submissions_left": self.max_submissions - len(subs), "submissions": subs,
                **({"reward_queries_left": self.rewards.left} if self.rewards is not None else {}),
                **({"compute": self.compute(), "compute_limits": dict(self.compute_limits)}
                   if self.compute is not None and self.compute_limits else {}),
                **({"spent": self.spent_reason} if self.spent_reason else {})}

    def host_path(self, path: str) -> Path:
        """A path as the agent names it (inside the sandbox, or on the host) -> the host path."""
        return workspace_host_path(self.workspace, path)

    def _code_snapshot(self, message: str) -> str:
        """The workspace's code now, in the grader's own repository (the agent's snapshots are separate)."""
        try:
            if self._code is None:
                self._code = Snapshots(self.cell_dir / "submitted_code.git", self.workspace)
            return self._code.commit(message) or self._code.head()
        except SnapshotError:  # the submission stands; its rerun has no code to start from
            return ""

    def submit(self, path: str, recipe: str = "") -> dict[str, Any]:
        with self._lock:  # one grading at a time; the count is checked and taken under the lock
            index = len(self.submissions) + 1
            record: dict[str, Any] = {"index": index, "path": path, "t": round(self.used_s(), 1),
                                      "time": utc_now()}
            if self.compute is not None:
                record["compute"] = self.compute()
                if self.compute_limits:  # past a limit since the driver last looked: spent now
                    self.check_limits(record["compute"])
            if self.remaining_s() <= 0:
                return {"ok": False, "error": "the budget is spent; no more submissions"}
            if len(self.submissions) >= self.max_submissions:
                return {"ok": False, "error": f"submission limit reached ({self.max_submissions})"}
            if not path:
                verdict_reason = "no path given"
                verdict = None
            else:
                copy_to = self.cell_dir / "submissions" / f"{index:03d}"
                verdict = validate_checkpoint(self.host_path(path), self.workspace, self.base_model, copy_to,
                                              self.max_bytes)
                # the agent sees paths as it named them, not the harness's folders
                verdict_reason = (verdict.reason.replace(str(copy_to), "<checkpoint>")
                                  .replace(str(self.workspace), INSIDE_WORKSPACE))
            record.update(ok=bool(verdict and verdict.ok), reason=verdict_reason)
            if verdict and verdict.ok:
                record.update(checkpoint=verdict.path, checkpoint_hash=verdict.checkpoint_hash,
                              size_bytes=verdict.size_bytes, submitted_path=self._relative(path),
                              recipe=recipe or self.recipes.get(self._relative(path), ""),
                              code=self._code_snapshot(f"submission {index}"))
                try:
                    dev = self.dev_score(verdict.path)
                    record.update(dev=dev["pass_at_1"], dev_ci=[dev["ci_low"], dev["ci_high"]])
                except Exception as exc:  # noqa: BLE001
                    record.update(ok=False, reason=f"scoring failed: {type(exc).__name__}: {exc}")
            self.submissions.append(record)
            with open(self.log, "a") as f:
                f.write(json.dumps(record) + "\n")
            self.on_event(f"submission {index}: " + (f"valid, dev {record['dev']:.3f}" if record["ok"]
                                                     else f"refused: {record['reason']}"))
        reply = {k: record.get(k) for k in ("ok", "index", "dev", "dev_ci", "reason")}
        reply["submissions_left"] = self.max_submissions - index
        return reply

    def _relative(self, path: str) -> str:
        """The path relative to the workspace, links not resolved (resolving would follow them)."""
        try:
            return safefs.relative_to_root(self.host_path(path), self.workspace)
        except safefs.UnsafePath:
            return path

    def sweep(self, path: str) -> dict[str, Any]:
        """Run the design at `path` as a Ray Tune sweep; one sweep at a time, `max_sweeps` in all.
        A design refused by validation does not count against the limit."""
        if self.sweep_fn is None or self.max_sweeps == 0:
            return {"ok": False, "error": "this task offers no sweeps"}
        with self._sweep_lock:
            if self.remaining_s() <= 0:
                return {"ok": False, "error": "the budget is spent; no more sweeps"}
            if len(self.sweeps) >= self.max_sweeps:
                return {"ok": False, "error": f"sweep limit reached ({self.max_sweeps})"}
            index = len(self.sweeps) + 1
            self.on_event(f"sweep {index}: {path}")
            self.sweeping = f"sweep {index} of {path} since {self.used_s():.0f} s"
            try:
                reply = self.sweep_fn(self.host_path(path), index)
            finally:
                self.sweeping = ""
            if reply.get("refused"):
                return {"ok": False, "error": reply["error"]}
            best = reply.get("best")
            if best and best.get("checkpoint"):
                self.recipes[self._relative(best["checkpoint"])] = best["command"]
            record = {"index": index, "path": path, "t": round(self.used_s(), 1), "time": utc_now(),
                      "ok": bool(reply.get("ok")), "best": best, "trials": len(reply.get("trials", [])),
                      "seconds": reply.get("seconds"), "cpu_s": reply.get("cpu_s"), "error": reply.get("error", "")}
            self.sweeps.append(record)
            with open(self.cell_dir / "sweeps.jsonl", "a") as f:
                f.write(json.dumps(record) + "\n")
            self.on_event(f"sweep {index}: " + (f"best dev {best['harness_dev']:.3f} ({best['trial']})" if best
                                                else reply.get("error", "no result")))
            return {**reply, "index": index, "sweeps_left": self.max_sweeps - index}

    def choose(self, select: str = "best") -> dict[str, Any] | None:
        """The submission the harness grades: best dev score (earliest on ties) or the last valid."""
        valid = [s for s in self.submissions if s.get("ok")]
        if not valid:
            return None
        if select == "last":
            return valid[-1]
        return max(valid, key=lambda s: (s["dev"], -s["index"]))

    def save_state(self) -> None:
        atomic_write_json(self.cell_dir / "grader.json", {
            "budget_s": self.budget_s, "used_s": self.used_s(), "submissions": self.submissions, "sweeps": self.sweeps,
            "reward_queries": self.rewards.summary() if self.rewards is not None else None})
