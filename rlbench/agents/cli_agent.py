"""A named coding-agent CLI (`agent=claude-code`, `codex`, `gemini-cli`, `opencode`, `aider`) run
in the cell's sandbox, from its clis.yaml entry.

The harness installs nothing at run time: the CLI comes from `rlbench agents install NAME` and is
mounted read-only. Its API keys come from the user's environment (the harness's process) and go to
the CLI's process only: not into the command line, PROMPT.md, the trajectory or any file, and any
echo of them in what is recorded is replaced by `[redacted]`. HOME is a private tmpfs, so the
CLI's config and session files never land in the workspace. Its API hosts are the only endpoints
the egress proxy lets through. Its stdout event stream goes to `agent_stream.jsonl` in the cell
folder and is read while it runs (tokens and cost per model into `llm_usage.json`; a token or
dollar budget stops it like the clock does) and then written as the cell's conversation.jsonl,
in react's shape.
"""

from __future__ import annotations

import os
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from rlbench.agents.base import Agent
from rlbench.agents.cli_install import Installed, installed
from rlbench.agents.cli_registry import CliSpec, cli_spec
from rlbench.agents.command import PROMPT
from rlbench.agents.event_streams import MAX_LINE, StreamParser, parser_for
from rlbench.config.core import ConfigError, check, load_config

if TYPE_CHECKING:
    from rlbench.harness.tools import ToolBox

STREAM_FILE = "agent_stream.jsonl"
READ_CHUNK = 8 * 1024 * 1024  # bytes of new stream read at one poll
SANDBOX_HOME = "/tmp/home"


@dataclass
class CliAgentConfig:
    model: str = ""  # empty: the entry's default model
    base_url: str = ""  # another endpoint for the CLI's API (a gateway, a local server): its host joins the egress list
    extra_hosts: list[str] = field(default_factory=list)  # more host:port endpoints the CLI may reach
    args: list[str] = field(default_factory=list)  # more arguments after the entry's invocation
    env: dict[str, str] = field(default_factory=dict)  # more settings for the process (not secrets: they are recorded)
    max_tokens_total: int = 0  # input + output tokens the CLI may use; 0: no limit
    max_cost_usd: float = 0.0  # 0: no limit
    usd_per_1m_input: float = 0.0  # prices for a CLI whose stream reports no cost
    usd_per_1m_output: float = 0.0
    seed: int = 0  # the cell's seed, which every agent is given (no CLI takes one)

    def validate(self) -> None:
        check(self.max_tokens_total >= 0, "agent_options.max_tokens_total", self.max_tokens_total, ">= 0")
        check(self.max_cost_usd >= 0, "agent_options.max_cost_usd", self.max_cost_usd, ">= 0")
        if self.base_url:
            parts = urlsplit(self.base_url)
            check(parts.scheme in ("http", "https") and bool(parts.hostname), "agent_options.base_url", self.base_url,
                  "an http(s) URL")


def base_url_host(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.hostname}:{parts.port or (443 if parts.scheme == 'https' else 80)}"


def api_keys(spec: CliSpec) -> dict[str, str]:
    """The CLI's keys from the harness's environment; ConfigError naming them when missing."""
    found = {k: os.environ[k] for k in spec.keys if os.environ.get(k)}
    missing = [k for k in spec.keys if k not in found]
    if (spec.any_key and not found) or (not spec.any_key and missing):
        need = " or ".join(spec.keys) if spec.any_key else ", ".join(missing)
        raise ConfigError(f"agent={spec.name} needs {need} set in the environment the harness runs in (the key is "
                          "handed to the CLI's process only, never written to the workspace)")
    return found


def preflight(name: str, options: dict[str, Any]) -> tuple[CliAgentConfig, Installed, dict[str, str]]:
    """Everything checkable before a cell starts, and what the run needs of it: the options, the
    install, the keys."""
    spec = cli_spec(name)
    cfg = load_config(CliAgentConfig, dict(options), source_name="agent_options")
    install = installed(name)
    if install is None:
        raise ConfigError(f"agent={name} is not installed: run `rlbench agents install {name}`")
    return cfg, install, api_keys(spec)


class CliAgent(Agent):
    """One class for every entry of clis.yaml; `adapter` names the entry."""

    def __init__(self, adapter: str, **options: Any):
        super().__init__(**options)
        self.adapter = adapter
        self.name = adapter

    def run(self, description: str, tools: ToolBox) -> None:
        spec = cli_spec(self.adapter)
        cfg, install, keys = preflight(self.adapter, self.options)
        model = cfg.model or spec.model
        prompt = PROMPT.format(description=description) + (f"\n{spec.prompt_note.strip()}\n" if spec.prompt_note else "")
        tools.write("PROMPT.md", prompt)
        sandbox = tools.sandbox
        sandbox.ro_binds.append((str(install.folder), str(install.folder)))
        hosts = list(spec.hosts) + list(cfg.extra_hosts) + ([base_url_host(cfg.base_url)] if cfg.base_url else [])
        if sandbox.sandboxed:
            opened = tools.open_egress(hosts)
            if not opened.get("ok"):
                raise ConfigError(f"agent={self.adapter}: {opened.get('error')}")
        home = SANDBOX_HOME if sandbox.sandboxed else str(sandbox.scratch / "home")
        env = {**spec.env, **cfg.env, **keys, "HOME": home,
               # last: a CLI's own virtualenv (aider's) must not shadow the python the agent trains with
               "PATH": f"{sandbox.env()['PATH']}:{install.executable.parent}"}
        if cfg.base_url and spec.base_url_env:
            env[spec.base_url_env] = cfg.base_url
        argv = [str(install.executable), *spec.argv(prompt, model, cfg.base_url), *cfg.args]
        settings = "".join(f"mkdir -p {shlex.quote(str(Path(home, p).parent))} && printf %s {shlex.quote(text)} > "
                           f"{shlex.quote(str(Path(home, p)))} && " for p, text in spec.home_files.items())
        command = f"mkdir -p {home} && {settings}exec {shlex.join(argv)}"
        stream = Path(tools.cell_dir) / STREAM_FILE
        parser = parser_for(spec.stream, model)
        follow = _Follower(stream, parser, cfg, tools)
        result = tools.run_program(command, env, stream, memory_gb=max(spec.memory_gb, sandbox.cfg.memory_gb),
                                   stop_check=follow.poll, redact=tuple(keys.values()))
        follow.finish()
        parser.close()
        secrets = tuple(keys.values())
        for record in parser.records:
            tools.log_event(_redact_record(record, secrets))
        follow.publish()
        totals = parser.totals()
        why = follow.stopped or (f"{self.adapter} exited with {result.get('returncode')}" if not result.get("ok")
                                 else f"{self.adapter} finished")
        tools.log_event({"event": "stop", "why": why, "tokens": {"prompt": totals.input_tokens,
                                                                  "completion": totals.output_tokens},
                         "skipped_stream_lines": parser.skipped_lines, "dropped_records": parser.dropped_records,
                         **({"cli_result": _redact_record(parser.final, secrets)} if parser.final else {})})


class _Follower:
    """Reads the stream file as it grows (called at each sandbox poll), keeps the usage published,
    and says why to stop once a token or dollar limit is passed."""

    def __init__(self, path: Path, parser: StreamParser, cfg: CliAgentConfig, tools: ToolBox):
        self.path, self.parser, self.cfg, self.tools = path, parser, cfg, tools
        self.offset = 0
        self.partial = b""
        self.stopped = ""

    def poll(self) -> str:
        """Everything the stream holds beyond what was read (in chunks: a line cut at a chunk's
        end waits in `partial`)."""
        fed = False
        try:
            with open(self.path, "rb") as f:
                f.seek(self.offset)
                while data := f.read(READ_CHUNK):
                    self.offset += len(data)
                    lines = (self.partial + data).split(b"\n")
                    self.partial = lines.pop()[:MAX_LINE]
                    for line in lines:
                        self.parser.feed(line)
                    fed = True
        except OSError:
            return ""
        if fed:
            self.publish()
        return self.check()

    def finish(self) -> None:
        """The stream's last line when it ended without a newline (the file was read to its end by
        run_program's last poll, before redaction)."""
        if self.partial:
            self.parser.feed(self.partial)
            self.partial = b""
            self.publish()

    def usage(self) -> dict[str, dict[str, Any]]:
        out = {}
        for model, u in self.parser.usage.items():
            cost = u.cost_usd
            if cost is None and (self.cfg.usd_per_1m_input or self.cfg.usd_per_1m_output):
                cost = (u.input_tokens * self.cfg.usd_per_1m_input + u.output_tokens * self.cfg.usd_per_1m_output) / 1e6
            out[model] = {"input_tokens": u.input_tokens, "output_tokens": u.output_tokens,
                          "cached_tokens": u.cached_tokens, "requests": u.requests,
                          "cost_usd": None if cost is None else round(cost, 6)}
        return out

    def publish(self) -> None:
        self.tools.record_usage(self.usage())

    def check(self) -> str:
        usage = self.usage().values()
        tokens = sum(u["input_tokens"] + u["output_tokens"] for u in usage)
        cost = sum(u["cost_usd"] or 0.0 for u in usage)
        if self.cfg.max_tokens_total and tokens > self.cfg.max_tokens_total:
            self.stopped = f"token budget spent ({tokens:,} > max_tokens_total={self.cfg.max_tokens_total:,})"
        elif self.cfg.max_cost_usd and cost > self.cfg.max_cost_usd:
            self.stopped = f"cost budget spent (${cost:.4f} > max_cost_usd={self.cfg.max_cost_usd})"
        return self.stopped


def _redact_record(record: Any, secrets: tuple[str, ...]) -> Any:
    if isinstance(record, str):
        for s in secrets:
            record = record.replace(s, "[redacted]") if s else record
        return record
    if isinstance(record, dict):
        return {k: _redact_record(v, secrets) for k, v in record.items()}
    if isinstance(record, list):
        return [_redact_record(v, secrets) for v in record]
    return record
