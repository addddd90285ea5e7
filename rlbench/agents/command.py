"""`command`: an external CLI agent (a coding assistant, any program) run inside the sandbox.

The harness writes `PROMPT.md` into the workspace (the task description and how to submit) and
runs `agent_options.command` there under bubblewrap, for whatever is left of the budget. Such an
agent must reach its LLM, so `agent_options.egress` lists the `host:port` endpoints it may reach;
they go through the harness's proxy (HTTP_PROXY/HTTPS_PROXY are set for it) and nothing else
leaves the sandbox. The program must be installed where the sandbox can see it: under `/usr`
(e.g. a global npm or apt install) or in the project's virtualenv. It submits with
`./grade submit PATH`, like anything else in the workspace. `agent_options.keys` names the
environment variables (API keys) taken from the harness's environment and handed to the program's
process only, as the named CLIs' keys are (rlbench/agents/cli_agent.py): never a file in the
workspace, where the snapshots would keep it.

Example, for a CLI agent that takes a prompt file and speaks to one API host:

    MY_AGENT_KEY=... rlbench run agent=command task=arith-grpo \\
        agent_options.command='my-agent --non-interactive --prompt-file PROMPT.md' \\
        'agent_options.egress=[api.example.com:443]' 'agent_options.keys=[MY_AGENT_KEY]'
"""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import TYPE_CHECKING

from rlbench.agents.base import Agent
from rlbench.config.core import ConfigError

if TYPE_CHECKING:
    from rlbench.harness.tools import ToolBox

PROMPT = """{description}

## How to work here

You run inside a sandbox in this folder (the workspace). Run commands, write code, train, and
submit checkpoint folders with `./grade submit PATH` (it prints the dev score); `./grade status`
shows the budget. Stop when you are done; the harness grades your best submission afterwards.
"""


class CommandAgent(Agent):
    name = "command"

    def run(self, description: str, tools: ToolBox) -> None:
        command = str(self.options.get("command", "")).strip()
        if not command:
            raise ConfigError("agent=command needs agent_options.command (the program to run in the workspace)")
        egress = list(self.options.get("egress") or [])
        tools.write("PROMPT.md", PROMPT.format(description=description))
        if egress:
            opened = tools.open_egress(egress)
            if not opened.get("ok"):
                raise ConfigError(f"agent=command: {opened.get('error')}")
        env = " ".join(f"{k}={shlex.quote(str(v))}" for k, v in dict(self.options.get("env") or {}).items())
        names = [str(k) for k in self.options.get("keys") or []]
        keys = {k: os.environ[k] for k in names if os.environ.get(k)}
        if missing := [k for k in names if k not in keys]:
            raise ConfigError(f"agent=command: {', '.join(missing)} not set in the environment the harness runs in")
        line = f"{env + ' ' if env else ''}{command}"
        if not keys:
            tools.exec(line)
            return
        tools.run_program(line, keys, Path(tools.cell_dir) / "agent_stream.jsonl", redact=tuple(keys.values()))
