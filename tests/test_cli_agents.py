"""The named coding-agent CLIs (rlbench/agents/clis.yaml) run as cells, each through a fake of its
CLI (tests/fake_cli.py: the real flags, key and base-URL variables, wire protocol and event
stream) installed the way `rlbench agents install NAME --from FOLDER` installs one, talking
through the sandbox's real egress proxy to a local scripted API server.

The scripted model has each CLI write a GRPO script, run it for 100 steps on arith-grpo and submit
the checkpoint (and print its API key on the way): the cell must end `ok` with a positive test
gain, its transcript in conversation.jsonl, its tokens and cost in result.json, and the planted
key nowhere in any cell artefact.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
import zipfile
from pathlib import Path

import pytest

from rlbench.sandbox.runner import bwrap_path
from scripted_llm import ScriptedLLM

HERE = Path(__file__).resolve().parent
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")


def fake_package(name: str, root: Path) -> Path:
    """The fake CLI for adapter `name` in the shape its registry serves: an npm package folder with a
    `bin` entry, or (aider) a wheel with a console script."""
    from rlbench.agents.cli_registry import cli_spec

    spec = cli_spec(name)
    folder = root / f"fake-{name}"
    folder.mkdir(parents=True)
    if spec.package_kind == "npm":
        (folder / "bin").mkdir()
        shutil.copy(HERE / "fake_cli.py", folder / "bin" / spec.bin)
        (folder / "bin" / spec.bin).chmod(0o755)
        (folder / "package.json").write_text(json.dumps({"name": f"fake-{name}", "version": "0.0.0",
                                                         "bin": {spec.bin: f"bin/{spec.bin}"}}))
    else:  # a wheel, as PyPI serves it (pip installs it without an index)
        dist = "fake_aider-0.0.0.dist-info"
        files = {"fake_aider.py": (HERE / "fake_cli.py").read_text(),
                 f"{dist}/METADATA": "Metadata-Version: 2.1\nName: fake-aider\nVersion: 0.0.0\n",
                 f"{dist}/WHEEL": "Wheel-Version: 1.0\nGenerator: rlbench-tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
                 f"{dist}/entry_points.txt": f"[console_scripts]\n{spec.bin} = fake_aider:main\n"}
        record = "".join(f"{n},,\n" for n in files) + f"{dist}/RECORD,,\n"
        folder = folder / "fake_aider-0.0.0-py3-none-any.whl"
        with zipfile.ZipFile(folder, "w") as whl:
            for n, text in {**files, f"{dist}/RECORD": record}.items():
                whl.writestr(n, text)
    return folder


def _step(name: str, command: str) -> dict:
    """One scripted model reply that runs `command`: a `bash` tool call, or for aider (which runs no
    command the model suggests) an edit of run.sh, the test command it runs after each edit."""
    if name == "aider":
        return {"content": f"run.sh\n```bash\n{command}\n```\n"}
    return {"tool": ("bash", json.dumps({"command": command}))}


def _base_url(name: str, llm: ScriptedLLM) -> str:
    """As each CLI takes it: Claude Code and Gemini CLI the origin, the others with /v1."""
    root = llm.base_url.rsplit("/v1", 1)[0]
    return root if name in ("claude-code", "gemini-cli") else f"{root}/v1"


def full_plan(name: str, key_var: str) -> list[dict]:
    """Read the prompt, print the key (a careless agent), then train and submit. Aider gets it in
    two edits of run.sh: one that fails (its output comes back), one that does the work."""
    if name == "aider":
        train = [step["content"].split("```bash\n", 1)[1].rsplit("\n```", 1)[0] for step in train_plan(name, 100)[:3]]
        return [_step(name, f'head -c 300 PROMPT.md; echo "my key is ${key_var}"; exit 3'),
                _step(name, "\n".join(train)), ]
    return [_step(name, "head -c 300 PROMPT.md"), _step(name, f'echo "my key is ${key_var}"'),
            *train_plan(name, 100)]


@needs_bwrap
@pytest.mark.slow
@pytest.mark.parametrize("name", ["claude-code", "codex", "gemini-cli", "opencode", "aider"])
def test_cli_adapter_trains_through_the_proxy_and_keeps_its_key_out_of_every_artefact(name, tmp_path, ray_cluster,
                                                                                       monkeypatch):
    from rlbench.agents.cli_install import install
    from rlbench.agents.cli_registry import cli_spec
    from rlbench.harness.cell import CellConfig, run_cell

    spec = cli_spec(name)
    install(name, str(fake_package(name, tmp_path / "pkg")), log=lambda m: None)
    key = f"sk-rlbench-canary-{uuid.uuid4().hex}"
    for var in spec.keys:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv(spec.keys[0], key)
    plan = full_plan(name, spec.keys[0])
    with ScriptedLLM(plan) as llm:
        cfg = CellConfig(agent=name, task="arith-grpo", seed=0, results=str(tmp_path / "results"), grace_s=10,
                         budget_s=900, agent_options={"base_url": _base_url(name, llm)})
        r = run_cell(cfg)
        sent_keys = [h.get("x-api-key") or h.get("x-goog-api-key") or h.get("authorization", "").removeprefix("Bearer ")
                     for h in llm.headers]
    assert r.status == "ok" and r.submissions["valid"] == 1, r
    assert r.gains["test"].abs > 0.03 and r.gains["test"].ci_low > 0, r.gains  # 100 GRPO steps: about +13 points
    n = len(plan)
    assert len(llm.requests) == n and set(sent_keys) == {key}  # the key reached the CLI and its API, nothing else

    cell = Path(r.cell_dir)
    events = [json.loads(line) for line in (cell / "conversation.jsonl").read_text().splitlines()]
    replies = [e for e in events if e["event"] == "reply"]
    assert len(replies) >= n and events[-1]["event"] == "stop", events
    text = json.dumps(events)
    assert "./grade submit runs/a/checkpoint" in text and "[redacted]" in text
    usage = r.llm_usage
    assert usage and sum(u["input_tokens"] for u in usage.values()) == 100 * n, usage
    assert sum(u["output_tokens"] for u in usage.values()) == 20 * n, usage
    if name != "codex" and name != "gemini-cli":  # they report no cost
        assert abs(sum(u["cost_usd"] for u in usage.values()) - n * (100 * 3 + 20 * 15) / 1e6) < 1e-6, usage
    log = [json.loads(line) for line in (cell / "egress.jsonl").read_text().splitlines()]
    assert log and all(e["allowed"] for e in log)

    # the key: in no file of the cell folder, nor in the workspace's snapshot history
    found = [str(p.relative_to(cell)) for p in cell.rglob("*")
             if p.is_file() and not p.is_symlink() and key.encode() in p.read_bytes()]
    assert found == [], found
    history = subprocess.run(["git", "--git-dir", str(cell / "snapshots.git"), "log", "-p", "--all"],
                             capture_output=True, text=True).stdout
    assert history and key not in history


def test_cli_preflight_refuses_before_any_work(tmp_path, monkeypatch):
    """Not installed, or its key missing: refused before a cell folder exists, naming the fix."""
    from rlbench.agents.cli_install import install, install_dir
    from rlbench.config.core import ConfigError
    from rlbench.harness.cell import CellConfig, run_cell

    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.delenv("GOOGLE_API_KEY", raising=False)
    results = tmp_path / "results"
    cfg = CellConfig(agent="gemini-cli", task="arith-tiny", seed=0, results=str(results), sandbox="none")
    shutil.rmtree(install_dir("gemini-cli"), ignore_errors=True)
    with pytest.raises(ConfigError, match="rlbench agents install gemini-cli"):
        run_cell(cfg)
    install("gemini-cli", str(fake_package("gemini-cli", tmp_path / "pkg")), log=lambda m: None)
    with pytest.raises(ConfigError, match="needs GEMINI_API_KEY set in the environment"):
        run_cell(cfg)
    with pytest.raises(ConfigError, match="agent_options.base_url"):
        run_cell(CellConfig(agent="gemini-cli", task="arith-tiny", seed=0, results=str(results), sandbox="none",
                            agent_options={"base_url": "ftp://x"}))
    assert not results.exists()


def _run(name: str, tmp_path: Path, monkeypatch, plan: list[dict], budget_s: float = 300, task: str = "arith-tiny",
         **options):
    from rlbench.agents.cli_install import install
    from rlbench.agents.cli_registry import cli_spec
    from rlbench.harness.cell import CellConfig, run_cell

    install(name, str(fake_package(name, tmp_path / "pkg")), log=lambda m: None)
    monkeypatch.setenv(cli_spec(name).keys[0], "sk-test")
    with ScriptedLLM(plan) as llm:
        cfg = CellConfig(agent=name, task=task, seed=0, results=str(tmp_path / "results"), grace_s=10,
                         budget_s=budget_s, agent_options={"base_url": _base_url(name, llm), **options})
        return run_cell(cfg), llm


@needs_bwrap
def test_a_token_budget_stops_the_cli_as_the_clock_does(tmp_path, ray_cluster, monkeypatch):
    """Each scripted reply counts 120 tokens: with max_tokens_total=250 the CLI is killed during
    its third command, not allowed its fourth request."""
    plan = [_step("claude-code", "sleep 4") for _ in range(4)] + [_step("claude-code", "./grade submit model")]
    r, llm = _run("claude-code", tmp_path, monkeypatch, plan, max_tokens_total=250)
    assert len(llm.requests) == 3, len(llm.requests)
    assert r.status == "budget_exceeded" and sum(u["input_tokens"] for u in r.llm_usage.values()) == 300, r
    events = [json.loads(line) for line in (Path(r.cell_dir) / "conversation.jsonl").read_text().splitlines()]
    assert events[-1]["event"] == "stop" and "token budget spent" in events[-1]["why"], events[-1]


@needs_bwrap
def test_node_fetch_needs_the_address_space_the_cli_entries_give(tmp_path):
    """Node's fetch (every Node CLI's HTTP client) reserves WebAssembly memory: under the sandbox's
    default 8 GB address-space limit it fails, under an entry's memory_gb it starts."""
    import shutil as sh

    from rlbench.agents.cli_registry import cli_spec
    from rlbench.sandbox.runner import Sandbox, SandboxConfig

    if sh.which("node") is None:
        pytest.fail("node is missing: make setup installs Node.js")
    (tmp_path / "ws").mkdir()
    sandbox = Sandbox(tmp_path / "ws", SandboxConfig(), 60)
    script = "node -e \"fetch('http://127.0.0.1:9/').catch(e => console.log('fetch ran:', e.message))\""
    default = sandbox.run(script, timeout=60)
    assert "Wasm memory" in default.stderr, default
    entry = sandbox.run(script, timeout=60, memory_gb=cli_spec("claude-code").memory_gb)
    assert entry.ok and "fetch ran: fetch failed" in entry.stdout, entry


def train_plan(name: str, steps: int) -> list[dict]:
    """What a coding agent does on an RL task: write a GRPO script (the reference agent's), run it,
    submit its checkpoint."""
    from rlbench.agents.reference import TRAIN_PY

    script = TRAIN_PY.replace("{algo}", "grpo").replace("{{", "{").replace("}}", "}")
    return [_step(name, f"cat > train.py <<'PY'\n{script}PY"),
            _step(name, f"python train.py steps={steps} out=runs/a seed=0 eval_every=0 > train.log 2>&1; tail -2 train.log"),
            _step(name, "./grade submit runs/a/checkpoint"),
            {"content": "Trained with GRPO and submitted."}]


@needs_bwrap
def test_the_command_agent_takes_its_keys_from_the_environment_only(tmp_path, ray_cluster, monkeypatch):
    """agent=command with agent_options.keys: the program gets the key, nothing the cell keeps does
    (what it printed is redacted), and a key not set is refused before the cell starts."""
    from rlbench.config.core import ConfigError
    from rlbench.harness.cell import CellConfig, run_cell

    key = f"sk-rlbench-canary-{uuid.uuid4().hex}"
    monkeypatch.setenv("MY_AGENT_KEY", key)
    program = "python -c \"import os; k = os.environ['MY_AGENT_KEY']; print('got', len(k), k)\" && ./grade submit model"
    cfg = CellConfig(agent="command", task="arith-tiny", seed=0, results=str(tmp_path / "results"), grace_s=10,
                     agent_options={"command": program, "keys": ["MY_AGENT_KEY"]})
    r = run_cell(cfg)
    assert r.status == "ok" and r.submissions["valid"] == 1, r
    cell = Path(r.cell_dir)
    run = [json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()][-1]
    assert f"got {len(key)} [redacted]" in run["result"]["stdout"], run
    assert [p for p in cell.rglob("*") if p.is_file() and key.encode() in p.read_bytes()] == []
    monkeypatch.delenv("MY_AGENT_KEY")
    with pytest.raises(ConfigError, match="MY_AGENT_KEY"):
        run_cell(cfg)


def test_the_stream_is_read_to_its_end_before_its_keys_are_redacted(tmp_path, monkeypatch):
    """Redaction shortens the stream file: the reader must have read it all first, or the offset
    it stopped at lands mid-line in the rewritten file and events are lost (seen in CI, under load)."""
    from rlbench.agents.cli_agent import CliAgentConfig, _Follower
    from rlbench.agents.event_streams import parser_for
    from rlbench.harness import tools as tools_module
    from rlbench.sandbox import SandboxConfig

    monkeypatch.setattr(tools_module, "request", lambda address, payload, timeout=0: {"ok": True, "remaining_s": 60})
    ws, cell = tmp_path / "ws", tmp_path / "cell"
    ws.mkdir()
    cell.mkdir()
    box = tools_module.ToolBox(cell, ws, "grader.sock", SandboxConfig(mode="none", disk_poll_s=0.05), budget_s=60)
    key = "sk-" + "k" * 60

    def line(i: int) -> str:
        return json.dumps({"type": "assistant", "message": {"id": f"m{i}", "content": [{"type": "text", "text": f"{i} {key}"}],
                                                            "usage": {"input_tokens": 1, "output_tokens": 1}}})

    first = "\n".join(line(i) for i in range(5))
    second = "\n".join(line(i) for i in range(5, 10))
    command = f"printf '%s\\n' '{first}'; sleep 1; printf '%s\\n' '{second}'"
    parser = parser_for("claude-stream-json", "m")
    follow = _Follower(cell / "stream.jsonl", parser, CliAgentConfig(), box)
    box.run_program(command, {}, cell / "stream.jsonl", stop_check=follow.poll, redact=(key,))
    follow.poll()
    follow.finish()
    assert parser.skipped_lines == 0 and len(parser.records) == 10, (parser.skipped_lines, len(parser.records))
    assert key not in (cell / "stream.jsonl").read_text() and "[redacted]" in (cell / "stream.jsonl").read_text()
