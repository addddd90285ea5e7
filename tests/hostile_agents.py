"""Agents that try what a careless or hostile agent would, for tests/test_harness.py.

They act only through the tools, like any agent; found by `hostile_agents:Class` (the tests put
this folder on the Ray workers' PYTHONPATH)."""

from __future__ import annotations

import os
import time
from typing import Any

from rlbench.agents.base import Agent

ATTACKS = {
    # the harness passes the real host paths it must keep out of reach as options
    "read_hidden": "cat {hidden_file}; ls {hidden_dir}",
    "write_outside": "echo pwned > {outside_file}; echo pwned > /workspace/../escape; touch /usr/escape",
    "network": "python -c \"import socket; socket.create_connection(('1.1.1.1', 80), timeout=3)\"",
    "fork_bomb": "bomb() {{ bomb | bomb & }}; bomb; sleep 2; echo done",
    "fill_disk": "head -c 400000000 /dev/zero > filler.bin; echo wrote",
}

MAKE_BAD = {
    "nan": "m.model.embed_tokens.weight.data[0, 0] = float('nan'); m.save_pretrained('bad_nan'); t.save_pretrained('bad_nan')",
    "arch": ("from transformers import GPT2Config, GPT2LMHeadModel; "
             "g = GPT2LMHeadModel(GPT2Config(n_layer=1, n_embd=32, n_head=2, vocab_size=len(t))); "
             "g.save_pretrained('bad_arch'); t.save_pretrained('bad_arch')"),
    "tokenizer": ("import json, os, shutil; shutil.copytree('model', 'bad_tokenizer'); "
                  "p = 'bad_tokenizer/tokenizer.json'; d = json.load(open(p)); v = d['model']['vocab']; "
                  "k = sorted(v)[-1]; v['zz_new_token'] = v.pop(k); json.dump(d, open(p, 'w'))"),
    "corrupt": ("import shutil, glob; shutil.copytree('model', 'bad_corrupt'); "
                "f = glob.glob('bad_corrupt/*.safetensors')[0]; open(f, 'wb').write(b'not a safetensors file')"),
    "link_out": "import os, shutil; shutil.copytree('model', 'bad_link_out'); os.symlink('/etc/passwd', 'bad_link_out/extra.txt')",
}


class Attacker(Agent):
    name = "attacker"

    def run(self, description: str, tools: Any) -> None:
        for attack in self.options.get("attacks", list(ATTACKS)):
            tools.exec(ATTACKS[attack].format(**self.options), timeout=30)
        # and submits nothing


class BadSubmitter(Agent):
    name = "bad-submitter"

    def run(self, description: str, tools: Any) -> None:
        head = ("from transformers import AutoModelForCausalLM, AutoTokenizer; "
                "m = AutoModelForCausalLM.from_pretrained('model'); t = AutoTokenizer.from_pretrained('model'); ")
        tools.python(head + "\n" + "\n".join(MAKE_BAD.values()))  # one interpreter start for all five
        for kind in MAKE_BAD:
            tools.submit(f"bad_{kind}")
        tools.submit("model")  # the sixth: over the task's cap of five


class Overrunner(Agent):
    """Runs a command past the budget."""

    def run(self, description: str, tools: Any) -> None:
        tools.exec("sleep 600 & sleep 600; echo never")


class Stubborn(Agent):
    """Never returns: loops in its own code, outside any tool."""

    def run(self, description: str, tools: Any) -> None:
        tools.status()
        while True:
            time.sleep(0.5)


class Sleeper(Agent):
    """Sits in a long command until the test kills its process."""

    def run(self, description: str, tools: Any) -> None:
        tools.exec("touch started; sleep 120")


class Slow(Agent):
    """Not hostile: submits the base model after a pause, so a test can stop a suite mid-cell.

    With RLBENCH_TEST_SLOW_GATE set to a folder, the first cell to get here pauses 4 s and every
    other cell 30 s: cells that run side by side would otherwise finish together, leaving no cell
    surely mid-run when the test kills the driver."""

    def run(self, description: str, tools: Any) -> None:
        pause = 4
        gate = os.environ.get("RLBENCH_TEST_SLOW_GATE")
        if gate:
            try:
                os.close(os.open(os.path.join(gate, "first"), os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pause = 30
        tools.exec(f"sleep {pause}", timeout=pause + 30)
        tools.submit("model")


class Raiser(Agent):
    def run(self, description: str, tools: Any) -> None:
        tools.status()
        raise ValueError("agent bug")


class DecoyReader(Agent):
    """Looks for the test answers in its workspace, reads them, and submits the base model."""

    def run(self, description: str, tools: Any) -> None:
        found = tools.exec("ls data; ls -a .rlbench 2>/dev/null || true")
        names = [n for n in found.get("stdout", "").split() if "test" in n or "heldout" in n]
        for name in names:
            tools.exec(f"head -c 600 data/{name}")
        tools.submit("model")


class FreshModel(Agent):
    """Submits a freshly initialised model with the base's config and tokenizer: it loads, has the
    right vocabulary and architecture, and finite weights, but was never the base model."""

    def run(self, description: str, tools: Any) -> None:
        tools.python("import torch; torch.manual_seed(0)\n"
                     "from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer\n"
                     "m = AutoModelForCausalLM.from_config(AutoConfig.from_pretrained('model'))\n"
                     "m.save_pretrained('fresh'); AutoTokenizer.from_pretrained('model').save_pretrained('fresh')\n")
        tools.submit("fresh")


class Grepper(Agent):
    """Not hostile: searches the whole workspace for a word (which opens every file, decoys too),
    then submits the base model."""

    def run(self, description: str, tools: Any) -> None:
        tools.exec("grep -rl --exclude-dir=model reward . | head -3")
        tools.submit("model")
