"""The named coding-agent CLIs (`agent=claude-code`, `agent=codex`, ...): declarative entries.

A CLI differs from another only in data: what to install, how to call it without a human, which
API hosts and key variables it needs, and what its event stream looks like. So each is one entry of
clis.yaml, read into a CliSpec here, and one generic runner (rlbench/agents/cli_agent.py) runs them
all; adding a CLI is adding an entry (and, for a new stream format, a parser in event_streams.py).
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from pathlib import Path

from rlbench.config.core import ConfigError, check, load_config

REGISTRY_FILE = Path(__file__).with_name("clis.yaml")
PLACEHOLDERS = {"prompt", "model", "base_url"}
_HOST = re.compile(r"^[A-Za-z0-9.-]+:\d{1,5}$")


@dataclass
class CliSpec:
    package: str  # npm:NAME or pypi:NAME
    version: str
    bin: str
    invocation: list[str]
    model: str
    hosts: list[str]
    keys: list[str]
    stream: str
    name: str = ""
    any_key: bool = False  # one of `keys` is enough (a CLI that reads either of two names)
    base_url_env: str = ""
    base_url: str = ""  # the endpoint {base_url} names when agent_options.base_url is not given
    env: dict[str, str] = field(default_factory=dict)
    home_files: dict[str, str] = field(default_factory=dict)  # path under HOME -> content
    prompt_note: str = ""
    memory_gb: float = 16.0

    def validate(self) -> None:
        from rlbench.agents.event_streams import PARSERS

        kind, _, pkg = self.package.partition(":")
        check(kind in ("npm", "pypi") and bool(pkg), f"{self.name}.package", self.package, "npm:PKG or pypi:PKG")
        check(bool(re.fullmatch(r"[A-Za-z0-9_.-]+", self.bin)), f"{self.name}.bin", self.bin, "a file name")
        check(bool(self.keys), f"{self.name}.keys", self.keys, "at least one variable")
        for host in self.hosts:
            check(bool(_HOST.match(host)), f"{self.name}.hosts", host, "host:port")
        check(self.stream in PARSERS, f"{self.name}.stream", self.stream, ", ".join(sorted(PARSERS)))
        used = {m for arg in self.invocation for m in re.findall(r"\{(\w+)\}", arg)}
        check(used <= PLACEHOLDERS and "prompt" in used, f"{self.name}.invocation", self.invocation,
              "arguments with {prompt}, and optionally {model} and {base_url}")
        check("base_url" not in used or bool(self.base_url), f"{self.name}.base_url", self.base_url,
              "the default endpoint, since the invocation names {base_url}")
        for path in self.home_files:
            check(bool(re.fullmatch(r"[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*", path)) and ".." not in path.split("/"),
                  f"{self.name}.home_files", path, "a relative path under HOME")
        check(self.memory_gb > 0, f"{self.name}.memory_gb", self.memory_gb, "> 0")

    @property
    def package_kind(self) -> str:
        return self.package.partition(":")[0]

    @property
    def package_name(self) -> str:
        return self.package.partition(":")[2]

    def argv(self, prompt: str, model: str, base_url: str = "") -> list[str]:
        """The command line after `bin`. Placeholders are replaced inside one argument, never
        re-split, so a prompt is one argument whatever it holds; the prompt last, so that nothing
        it holds is read as another placeholder."""
        values = {"model": model, "base_url": base_url or self.base_url}
        return [re.sub(r"\{(model|base_url)\}", lambda m: values[m.group(1)], a).replace("{prompt}", prompt)
                for a in self.invocation]


@functools.lru_cache(maxsize=1)
def registry() -> dict[str, CliSpec]:
    from omegaconf import OmegaConf

    raw = OmegaConf.to_container(OmegaConf.load(REGISTRY_FILE))
    if not isinstance(raw, dict):
        raise ConfigError(f"{REGISTRY_FILE}: not a mapping of CLI names to entries")
    return {name: load_config(CliSpec, {**entry, "name": name}, source_name=f"{REGISTRY_FILE.name}:{name}")
            for name, entry in raw.items()}


def cli_spec(name: str) -> CliSpec:
    specs = registry()
    if name not in specs:
        raise ConfigError(f"unknown coding-agent CLI '{name}'; known: {', '.join(specs)}")
    return specs[name]
