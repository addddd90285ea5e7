"""The tools an agent works through: exec, python, read, write, submit, sweep, claim, status.

Each tool is a ToolBox method marked `@tool`; rlbench/harness/tool_registry.py reads them from here
for everything else that names tools (the LLM function list, replay, the workspace description).
Every call is timed against the cell's budget (the grading server holds the clock), recorded in
the trajectory, and followed by a code snapshot when it may have changed files. exec and python
run in the sandbox; read and write touch only paths inside the workspace (links that lead out are
refused); submit, sweep, claim and status go to the grading server, like `./grade` inside the
sandbox does. Results are plain dicts, so an LLM agent can show them to its model as JSON.

The sandbox meters each command's CPU seconds (its whole process tree, rlbench/sandbox/
accounting.py); the ToolBox records them per call and keeps the running total in the cell folder
for the driver's compute meter, and stops a running command when the driver says the cell's CPU or
GPU limit has passed (rlbench/sandbox/compute.py).
"""

from __future__ import annotations

import os
import resource
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from rlbench import safefs
from rlbench.grading.client import request
from rlbench.harness.tool_registry import ToolSpec, names, specs_of, tool
from rlbench.io import atomic_write_json, utc_now
from rlbench.record import Snapshots, Trajectory, running
from rlbench.sandbox.compute import publish_sandbox_cpu, stop_reason
from rlbench.sandbox.ownership import sandbox_owner
from rlbench.sandbox.runner import Sandbox, SandboxConfig, workspace_host_path

READ_LIMIT = 200_000


@dataclass
class Outcome:
    """A tool body's result when the call is recorded other than its spec says: no snapshot after
    all (`changed`), or CPU seconds the sandbox metered for it (`cpu_s`)."""

    result: dict[str, Any]
    changed: bool | None = None  # None: as the tool's spec says
    cpu_s: float | None = None  # None: the reaped children's CPU seconds


class ToolBox:
    def __init__(self, cell_dir: Path, workspace: Path, grader_socket: str, sandbox: SandboxConfig, budget_s: float,
                 cpus: int = 2, visible_gpus: str | None = None):
        self.cell_dir, self.workspace = Path(cell_dir), Path(workspace).resolve()
        self.grader = grader_socket
        self.sandbox = Sandbox(self.workspace, sandbox, budget_s, cpus, grader_socket=Path(grader_socket),
                               scratch=self.cell_dir / "scratch", visible_gpus=visible_gpus)
        self.trajectory = Trajectory(self.cell_dir / "trajectory.jsonl")
        self._events = Trajectory(self.cell_dir / "conversation.jsonl")
        self.snapshots = Snapshots(self.cell_dir / "snapshots.git", self.workspace)
        self.sandbox.cpu_listener = self._publish_cpu
        self.sandbox.stop_check = self._stop_requested
        self._publish_cpu(self.sandbox.cpu_used_s)
        self.calls = 0
        self.budget_hit = False
        self._py = 0
        self._egress: Any = None
        self._egress_env: dict[str, str] = {}
        self._egress_prefix = ""
        self._program_stop: Callable[[], str] | None = None
        self.usage: dict[str, dict[str, Any]] = {}  # the agent's LLM use per model (record_usage)

    def log_event(self, record: dict[str, Any]) -> None:
        """An agent's own record (LLM messages, API failures) beside the trajectory:
        conversation.jsonl in the cell folder, outside the workspace."""
        self._events.add({"time": utc_now(), **record})

    def open_egress(self, allow: list[str]) -> dict[str, Any]:
        """Let later commands reach exactly the `host:port` endpoints in `allow`, through the
        harness's proxy (rlbench/sandbox/egress.py); nothing else gets out. Only with bubblewrap:
        without a sandbox the network is open anyway, and the result says so."""
        from rlbench.sandbox.egress import BRIDGE_PORT, INSIDE_EGRESS, EgressProxy, bridge_prefix

        if not self.sandbox.sandboxed:
            return {"ok": False, "error": "sandbox=none: commands already reach the network; no proxy in between"}
        if self._egress is None:
            folder = Path(tempfile.mkdtemp(prefix="rlbe-"))
            os.chmod(folder, 0o755)
            self._egress = EgressProxy(folder / "egress.sock", allow, self.cell_dir / "egress.jsonl").start()
            self.sandbox.binds.append((str(self._egress.socket_path), INSIDE_EGRESS))
            url = f"http://127.0.0.1:{BRIDGE_PORT}"
            self._egress_env = {"HTTP_PROXY": url, "HTTPS_PROXY": url, "http_proxy": url, "https_proxy": url,
                                "NO_PROXY": "", "no_proxy": ""}
            self._egress_prefix = bridge_prefix()
        return {"ok": True, "allowed": sorted(self._egress.allow), "proxy": self._egress_env["HTTP_PROXY"]}

    # budget -----------------------------------------------------------------------------------
    def _publish_cpu(self, total_s: float) -> None:
        """The commands' CPU seconds so far, where the driver's compute meter reads them."""
        publish_sandbox_cpu(self.cell_dir, total_s, self.sandbox.cpu_meter)

    def _stop_requested(self) -> str:
        """Why the driver stopped the agent (a CPU or GPU limit passed), or the running program's own
        limit (a CLI agent's token or dollar budget), or ''."""
        return stop_reason(self.cell_dir) or (self._program_stop() if self._program_stop is not None else "")

    def record_usage(self, usage: dict[str, dict[str, Any]]) -> None:
        """The agent's LLM tokens and cost per model so far, kept in the cell folder (outside the
        workspace) at each update, so a cell whose agent is killed still reports them."""
        self.usage = {str(k)[:200]: dict(v) for k, v in list(usage.items())[:50]}
        atomic_write_json(self.cell_dir / "llm_usage.json", self.usage)

    def run_program(self, command: str, env: dict[str, str], stream_to: Path, memory_gb: float | None = None,
                    stop_check: Callable[[], str] | None = None, redact: tuple[str, ...] = ()) -> dict[str, Any]:
        """Run an agent program (a coding-agent CLI) in the sandbox for the rest of the budget, as
        the `exec` tool does and recorded like it, with `env` handed to the process only (API keys:
        never in the command line, the trajectory or any file), its whole stdout in `stream_to`
        (a harness file), and `stop_check` polled while it runs and once after it ends. Every string
        of `redact` is then replaced in what is recorded (a key the program printed), the stream
        file included."""
        left = self.remaining()
        if left <= 0:
            return self._record("exec", {"command": command}, self._spent().result, time.monotonic(), _children_cpu(),
                                False)
        t0, cpu0 = time.monotonic(), _children_cpu()
        self._program_stop = stop_check
        try:
            with running(self.cell_dir, "exec", command):
                r = self.sandbox.run(self._egress_prefix + command, timeout=left, env={**self._egress_env, **env},
                                     stdout_path=stream_to, memory_gb=memory_gb)
        finally:
            self._program_stop = None
        if stop_check is not None:  # its last read of the stream, before redaction rewrites (shortens) it
            stop_check()
        _redact_file(stream_to, redact)
        if r.killed in ("timeout", "budget"):
            self.budget_hit = True
        result = {"ok": r.ok, "returncode": r.returncode, "stdout": _redact(r.stdout, redact),
                  "stderr": _redact(r.stderr, redact), "seconds": round(r.seconds, 2), "cpu_s": round(r.cpu_s, 2),
                  "killed": r.killed, "truncated": r.truncated}
        return self._record("exec", {"command": command}, result, t0, cpu0, True, cpu_s=r.cpu_s)

    def remaining(self) -> float:
        st = request(self.grader, {"op": "status"}, timeout=30)
        return float(st.get("remaining_s", 0.0))

    def _invoke(self, spec: ToolSpec, args: dict[str, Any], body: Callable[[], dict[str, Any] | Outcome]
                ) -> dict[str, Any]:
        """Every tool call passes here (the `@tool` decorator sends it): time the body, then record
        it. An exception in the body (the grading server gone) is raised as it is, unrecorded."""
        t0, cpu0 = time.monotonic(), _children_cpu()
        out = body()
        if not isinstance(out, Outcome):
            out = Outcome(out)
        changed = spec.changes_files if out.changed is None else out.changed
        return self._record(spec.name, args, out.result, t0, cpu0, changed, cpu_s=out.cpu_s)

    def _record(self, tool: str, args: dict[str, Any], result: dict[str, Any], t0: float, cpu0: float,
                changed: bool, cpu_s: float | None = None) -> dict[str, Any]:
        """`cpu_s`: the call's CPU seconds where the sandbox metered them; else the reaped
        children's (what a read or a submit starts itself)."""
        self.calls += 1
        seconds = time.monotonic() - t0
        cpu = _children_cpu() - cpu0 if cpu_s is None else cpu_s
        commit, snapshot_error = None, ""
        if changed:  # a snapshot that fails (a hostile tree, a git timeout) never loses the call's record
            try:
                commit = self.snapshots.commit(f"{self.calls}: {tool}")
            except Exception as exc:  # noqa: BLE001
                snapshot_error = f"{type(exc).__name__}: {exc}"[:300]
        self.trajectory.add({"tool": tool, "args": args, "result": result, "seconds": round(seconds, 3),
                             "cpu_s": round(cpu, 2), "snapshot": commit, "ok": bool(result.get("ok")),
                             "time": utc_now(), **({"snapshot_error": snapshot_error} if snapshot_error else {})})
        return result

    def _spent(self) -> Outcome:
        self.budget_hit = True
        return Outcome({"ok": False, "error": "the budget is spent"}, changed=False)

    # paths ------------------------------------------------------------------------------------
    def relative(self, path: str) -> str:
        """A path as the agent names it (relative, /workspace/..., or the host path) -> the path
        relative to the workspace, without resolving links (resolving follows them); '..' and
        paths outside are refused. The file is then reached through rlbench/safefs.py, which
        refuses a link on any part of the way."""
        try:
            return safefs.relative_to_root(workspace_host_path(self.workspace, path), self.workspace)
        except safefs.UnsafePath:
            raise PermissionError(f"'{path}' is outside the workspace") from None

    # tools ------------------------------------------------------------------------------------
    # A tool's docstring is what the agent's model reads about it (rlbench/harness/tool_registry.py
    # turns it and the type hints into the function schema); notes for maintainers go here, in
    # comments. The decorator records every argument and snapshots after the tools that change files.

    @tool(changes_files=True)
    def exec(self, command: str, timeout: float | None = None) -> Outcome:
        """Run a shell command in the workspace (sandboxed); it is killed when the budget runs out.

        Args:
            command: the command line (bash), run in the workspace folder.
            timeout: seconds before the command is killed (default: whatever is left of the budget).
        """
        return self._sandboxed("exec", command, timeout)

    @tool(changes_files=True)
    def python(self, code: str, timeout: float | None = None) -> dict[str, Any] | Outcome:
        """Run Python code in the workspace (sandboxed); the script is saved under .rlbench/tool/ first.

        Args:
            code: the Python source to run.
            timeout: seconds before it is killed (default: whatever is left of the budget).
        """
        self._py += 1
        rel = f".rlbench/tool/py_{self._py:04d}.py"
        try:  # the agent may have planted links or special files on that path: written without following them
            safefs.write_text(self.workspace, rel, code, owner=sandbox_owner(), dir_owner=sandbox_owner())
        except OSError as exc:
            return Outcome({"ok": False, "error": f"cannot save the script at {rel}: {exc}"}, changed=False)
        return self._sandboxed("python", f"python {self.sandbox.root}/{rel}", timeout)

    def _sandboxed(self, tool_name: str, command: str, timeout: float | None) -> Outcome:
        left = self.remaining()
        if left <= 0:
            return self._spent()
        limit = min(left, timeout) if timeout else left
        with running(self.cell_dir, tool_name, command):
            r = self.sandbox.run(self._egress_prefix + command, timeout=limit, env=self._egress_env)
        if (r.killed == "timeout" and limit >= left) or r.killed == "budget":
            self.budget_hit = True
        result = {"ok": r.ok, "returncode": r.returncode, "stdout": r.stdout, "stderr": r.stderr,
                  "seconds": round(r.seconds, 2), "cpu_s": round(r.cpu_s, 2), "killed": r.killed,
                  "truncated": r.truncated, "max_rss_mb": _children_max_rss_mb()}
        return Outcome(result, cpu_s=r.cpu_s)

    @tool(changes_files=False)
    def read(self, path: str, max_bytes: int = READ_LIMIT) -> dict[str, Any]:
        """Read a file, or list a folder, inside the workspace.

        Args:
            path: relative to the workspace, or /workspace/...
            max_bytes: read at most this many bytes from the start of a file (the default is also the cap).
        """
        try:
            rel = self.relative(path)
            listing = safefs.list_dir(self.workspace, rel)
            if listing is not None:
                return {"ok": True, "entries": listing}
            data, size = safefs.read_head(self.workspace, rel, min(max_bytes, READ_LIMIT))
            return {"ok": True, "content": data.decode("utf-8", "replace"), "truncated": size > len(data),
                    "bytes": size}
        except (OSError, PermissionError) as exc:
            return {"ok": False, "error": str(exc)}

    @tool(changes_files=True)
    def write(self, path: str, content: str) -> dict[str, Any]:
        """Write a text file inside the workspace (replacing it if it exists).

        Args:
            path: relative to the workspace, or /workspace/...
            content: the whole text of the file.
        """
        try:
            safefs.write_text(self.workspace, self.relative(path), content, owner=sandbox_owner(),
                              dir_owner=sandbox_owner())
            return {"ok": True, "bytes": len(content.encode())}
        except (OSError, PermissionError) as exc:
            return {"ok": False, "error": str(exc)}

    @tool(changes_files=False)
    def submit(self, path: str, recipe: str = "") -> dict[str, Any]:
        """Submit a checkpoint folder; answers with its dev score.

        Args:
            path: the checkpoint folder, relative to the workspace or /workspace/...
            recipe: the command that made it (`{seed}` where the seed goes), rerun by the harness across
                seeds and model sizes.
        """
        return request(self.grader, {"op": "submit", "path": path, **({"recipe": recipe} if recipe else {})})

    # a sweep writes its trials' checkpoints into the workspace (sweeps/NNN/): a snapshot follows
    @tool(changes_files=True, needs="sweeps")
    def sweep(self, path: str) -> dict[str, Any]:
        """Hand the harness a design file (YAML): it runs a Ray Tune sweep of its search space and answers
        with the trial table and the best configuration and checkpoint.

        Args:
            path: the design file, relative to the workspace or /workspace/...
        """
        return request(self.grader, {"op": "sweep", "path": path}, timeout=24 * 3600)

    # the grading server checks the numbers (rlbench/grading/server.py); evaluate tasks score the claim
    @tool(changes_files=False, needs="claims")
    def claim(self, index: int, test_gain: float, ci: tuple[float, float]) -> dict[str, Any]:
        """Claim a submission's absolute test gain over the base model with its 95% interval; the harness
        scores the claim against its own measurement. A later claim on the same submission replaces it.

        Args:
            index: the submission's index, as `submit` and `status` give it.
            test_gain: the gain as a fraction (0.12 is +12 points).
            ci: [low, high], the 95% interval of the gain, as fractions.
        """
        return request(self.grader, {"op": "claim", "index": index, "test_gain": test_gain, "ci": list(ci)},
                       timeout=30)

    @tool(changes_files=False)
    def status(self) -> dict[str, Any]:
        """Budget used and left, submissions so far."""
        return request(self.grader, {"op": "status"}, timeout=30)


# the one list of agent tools: everything that names tools (react, replay, the workspace text) reads it
TOOL_SPECS: tuple[ToolSpec, ...] = specs_of(ToolBox)
TOOLS = names(TOOL_SPECS)  # their names, in the order the ToolBox defines them


def _redact(text: str, secrets: tuple[str, ...]) -> str:
    for secret in secrets:
        if secret:
            text = text.replace(secret, "[redacted]")
    return text


def _redact_file(path: Path, secrets: tuple[str, ...], cap: int = 256 * 1024 * 1024) -> None:
    """A program's stream as the cell folder keeps it, with every secret it printed replaced; a
    stream past `cap` is cut there (its head is what a person reads)."""
    if not any(secrets) or not path.is_file():
        return
    with open(path, "rb") as f:
        data = f.read(cap)
    for secret in secrets:
        if secret:
            data = data.replace(secret.encode(), b"[redacted]")
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_bytes(data)
    tmp.replace(path)


def _children_max_rss_mb() -> float:
    """The largest resident set of any command this process has run so far (Linux: KiB)."""
    return round(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024, 1)


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime
