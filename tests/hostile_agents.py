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


# the grading server under a connection flood (issue 21, hole 5) ------------------------------
# Run inside the sandbox (N and HOLD are prepended): open N idle connections to the grader and
# hold them; write `flood_holding` once they are open; after HOLD seconds, count how many the
# server has closed (refused over its cap, or timed out idle) and print the counts as JSON.
FLOOD_SCRIPT = r'''
import json, os, resource, socket, time
soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
addr, held, failed, t0 = os.environ["RLBENCH_GRADER"], [], 0, time.monotonic()
for _ in range(N):
    try:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    except OSError:  # out of descriptors: hold what is open
        break
    try:  # blocking: waits for room in the listen backlog (a timeout would make it fail at once)
        s.connect(addr)
        held.append(s)
    except OSError:
        s.close()
        failed += 1
open("flood_holding", "w").write(str(len(held)))
time.sleep(HOLD)
closed = refused = 0
for s in held:
    s.setblocking(False)
    data = b""
    try:
        while True:
            chunk = s.recv(4096)
            if not chunk:
                closed += 1
                break
            data += chunk
    except BlockingIOError:
        pass
    except OSError:
        closed += 1
    refused += b"too many open connections" in data
print(json.dumps({"opened": len(held), "failed": failed, "closed_by_server": closed, "refused": refused,
                  "nofile": hard, "seconds": round(time.monotonic() - t0, 1)}))
'''


class GraderFlooder(Agent):
    """Floods the grading socket from inside the sandbox with idle connections (options:
    `connections`, `hold_s`) and, while they are held, submits the base model through its tools;
    once they are gone it asks `./grade status` from inside the sandbox."""

    def run(self, description: str, tools: Any) -> None:
        import threading

        n, hold = int(self.options.get("connections", 3000)), float(self.options.get("hold_s", 8))
        code = f"N, HOLD = {n}, {hold}\n" + FLOOD_SCRIPT
        flood = threading.Thread(target=tools.python, args=(code,), kwargs={"timeout": hold + 60}, daemon=True)
        flood.start()
        deadline = time.monotonic() + 60
        while flood.is_alive() and time.monotonic() < deadline and not tools.read("flood_holding").get("ok"):
            time.sleep(0.5)
        tools.submit("model")  # while the flood holds its connections
        flood.join(timeout=hold + 90)
        tools.exec("./grade status")


# Run inside the sandbox (GUESS and SECRET_FILE are prepended): rebuild the hidden splits from
# what an agent can find (the workspace's task.json for the sizes, the generator and seed its
# public task file names, the base model's zoo record if the workspace holds one), try to read the
# installation's split secret, and write what it got to `rebuilt.json`.
REBUILD_SCRIPT = r'''
import json, os
from pathlib import Path
os.environ["RLBENCH_SPLIT_SEED"] = "public"  # the seed the public task file names
from rlbench.data.splits import fingerprint, generate_splits
from rlbench.tasks.public import load_workspace_task
from rlbench.tasks.spec import DataSource
task = load_workspace_task(Path("/workspace"))
meta = Path("/workspace/model/rlbench_model.json")
task.data.source = DataSource.generator
task.data.generator, task.data.params, task.data.seed = GUESS["generator"], dict(GUESS["params"]), GUESS["seed"]
splits = generate_splits(task)
try:
    secret = Path(SECRET_FILE).read_text()
except OSError as exc:
    secret = f"unreadable: {type(exc).__name__}"
Path("/workspace/rebuilt.json").write_text(json.dumps({
    "fingerprints": {s: fingerprint(splits[s]) for s in ("test", "heldout")},
    "model_meta": meta.exists(), "secret": secret}))
print("rebuilt")
'''


class SplitRebuilder(Agent):
    """Rebuilds test and heldout inside the sandbox from rlbench.data.splits and the task's public
    seed (options: `guess`, the public task file's generator, params and seed; `secret_file`, the
    host path of the installation's split secret), writes the fingerprints it got to
    `rebuilt.json`, then submits the base model."""

    def run(self, description: str, tools: Any) -> None:
        code = f"GUESS = {self.options['guess']!r}\nSECRET_FILE = {self.options['secret_file']!r}\n" + REBUILD_SCRIPT
        tools.python(code, timeout=120)
        tools.submit("model")


class SharpenedSampler(Agent):
    """Gains without training: submits the base with its final norm scaled by 8 (a lower sampling
    temperature) and min_p in generation_config.json, then the base with only the min_p."""

    def run(self, description: str, tools: Any) -> None:
        tools.python("import json, shutil, torch\n"
                     "from transformers import AutoModelForCausalLM, AutoTokenizer\n"
                     "m = AutoModelForCausalLM.from_pretrained('model')\n"
                     "with torch.no_grad():\n    m.model.norm.weight.mul_(8.0)\n"
                     "m.save_pretrained('sharp'); AutoTokenizer.from_pretrained('model').save_pretrained('sharp')\n"
                     "shutil.copytree('model', 'minp')\n"
                     "for d in ('sharp', 'minp'):\n"
                     "    json.dump({'min_p': 0.3, 'top_k': 2, 'temperature': 0.2}, open(d + '/generation_config.json', 'w'))\n")
        tools.submit("sharp")
        tools.submit("minp")


# compute metering (tests/test_compute_meter.py) ----------------------------------------------
# A busy loop of ARGV[1] CPU seconds (this process's own clock); prints them. With a second
# argument FILE it then writes them to FILE and sleeps until killed: a background child whose CPU
# is known exactly, killed at the end of the call.
BURN_SCRIPT = '''
import os, sys, time
t = time.process_time()
while time.process_time() - t < float(sys.argv[1]):
    pass
used = time.process_time()
if len(sys.argv) > 2:
    with open(sys.argv[2] + ".tmp", "w") as f:
        f.write(f"{used:.4f} {os.getpid()}")
    os.rename(sys.argv[2] + ".tmp", sys.argv[2])
    time.sleep(600)
print(f"{used:.4f}")
'''


class CpuBurner(Agent):
    """Burns `seconds` CPU seconds in one sandboxed command, then submits the base model."""

    def run(self, description: str, tools: Any) -> None:
        tools.write("burn.py", BURN_SCRIPT)
        tools.exec(f"python burn.py {self.options.get('seconds', 3)}", timeout=float(self.options.get("timeout", 300)))
        tools.submit("model")
