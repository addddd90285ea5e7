"""Hostile agents against the harness's file handling (issue 21, holes 1, 4, 6, 7, 8), for
tests/test_security_files.py. Like every agent they act only through the tools; the host paths they
aim at come in as options, as an agent would read them from /proc/self/mountinfo."""

from __future__ import annotations

from typing import Any

from rlbench.agents.base import Agent

# makes `n` swaps a second between a plain file and a link to `target` at `path`, for `seconds`
SWAPPER = """
import os, sys, time
path, target, seconds = sys.argv[1], sys.argv[2], float(sys.argv[3])
end = time.time() + seconds
while time.time() < end:
    try:
        os.unlink(path)
    except FileNotFoundError:
        pass
    os.symlink(target, path)
    time.sleep(0.0005)
    os.unlink(path)
    with open(path, "w") as f:
        f.write("{}")
    time.sleep(0.0005)
"""


class LinkPlanter(Agent):
    """Plants links where the root harness writes: the python tool's next script, the folder it
    goes in, a folder `write` goes through, and a file `write` replaces; each leads to a host file
    the agent must never change (`target_file`) or a host folder (`target_dir`)."""

    def run(self, description: str, tools: Any) -> None:
        target, folder = self.options["target_file"], self.options["target_dir"]
        tools.exec(f"mkdir -p .rlbench/tool && ln -sf {target} .rlbench/tool/py_0002.py && "
                   f"ln -sfn {folder} escape && ln -sf {target} notes.txt")
        tools.python("print('first script')")  # py_0001: a plain write
        tools.python("print('second script')")  # py_0002: the planted link
        tools.write("escape/planted.txt", "written through a link")
        tools.write("notes.txt", "replaces the link, not its target")
        tools.exec(f"rm -rf .rlbench/tool && ln -sfn {folder} .rlbench/tool")
        tools.python("print('third script')")  # the whole folder is a link now
        tools.read("escape")  # listing through a link
        tools.read("notes.txt")
        tools.submit("model")


class FifoPlanter(Agent):
    """Leaves FIFOs, a socket-like special file and huge sparse files where the harness reads after
    the agent: step logs, text files the decoy scan reads, a file named like code."""

    def run(self, description: str, tools: Any) -> None:
        tools.exec("mkdir -p runs/a runs/b && mkfifo runs/a/steps.jsonl && mkfifo notes.txt && mkfifo train.py "
                   "&& truncate -s 1900M runs/b/steps.jsonl && truncate -s 1900M big.py && mkfifo DIAGNOSIS.md")
        tools.read("notes.txt")  # a read tool call on a FIFO must not block either
        tools.submit("model")


class SwapRacer(Agent):
    """Submits a checkpoint from inside the sandbox while a background process swaps one of its
    files between a plain file and a link to a host file it cannot read (`target_file`): the
    check-then-copy race."""

    def run(self, description: str, tools: Any) -> None:
        tools.write("swap.py", SWAPPER)
        tools.exec("cp -r model ckpt")
        tools.exec(f"python swap.py ckpt/extra.json {self.options['target_file']} 20 & sleep 0.3; "
                   "for i in 1 2 3 4 5; do ./grade submit ckpt; done; wait", timeout=120)


class SnapshotBloater(Agent):
    """Grows the snapshot repository: a huge sparse file, many files, a big dense file, and a
    `.gitignore` of everything, beside one code file that must still be snapshotted."""

    def run(self, description: str, tools: Any) -> None:
        tools.exec("truncate -s 1900M sparse.txt && truncate -s 1900M sparse2.txt && head -c 30000000 /dev/urandom > dense.txt && "
                   "mkdir many && (cd many && seq 1 8000 | xargs touch) && echo '*' > .gitignore && "
                   "echo 'LR = 3e-4  # the agent code' > train.py")
        tools.status()
        tools.submit("model")


class HardLinkReader(Agent):
    """Reads every file under data/ and .rlbench/ through hard links made in another folder and
    through a glob, never naming a decoy, then submits the base model."""

    def run(self, description: str, tools: Any) -> None:
        tools.exec("mkdir -p hl && i=0; for f in $(find data .rlbench -type f); do i=$((i+1)); ln $f hl/f$i; done; "
                   "cat hl/* > /dev/null; cat data/* .rlbench/*/* > /dev/null 2>&1; true")
        tools.submit("model")
