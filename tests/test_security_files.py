"""The harness's file handling against a hostile workspace (issue 21, holes 1, 4, 6, 7, 8; the
contract is SECURITY.md): no root write through a planted link, no hang on a FIFO, no
check-then-copy race, snapshots that stay small and see past `.gitignore`, decoys seen by inode.
Agents act only through the tools (tests/hostile_files.py)."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import threading
import time
from pathlib import Path

import pytest

from rlbench.sandbox import bwrap_path

TINY = "arith-tiny"
needs_bwrap = pytest.mark.skipif(bwrap_path() is None, reason="bubblewrap missing: make setup installs it")
SECRET = b"HOST-SECRET-never-in-a-checkpoint"


def _cell(tmp_path, agent, **kw):
    from rlbench.harness.cell import CellConfig, run_cell

    return run_cell(CellConfig(agent=agent, task=TINY, seed=0, results=str(tmp_path / "results"), grace_s=10, **kw))


def _host_secret(tmp_path) -> Path:
    """A root-owned file outside every workspace, in a folder the sandbox uid cannot enter."""
    folder = tmp_path / "host"
    folder.mkdir()
    os.chmod(folder, 0o700)
    target = folder / "secret.txt"
    target.write_bytes(SECRET)
    os.chmod(target, 0o600)
    return target


# the class: every operation of rlbench/safefs.py -------------------------------------------------
def test_safefs_refuses_links_and_special_files_everywhere(tmp_path):
    from rlbench import safefs

    root, outside = tmp_path / "ws", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    target = outside / "victim.txt"
    target.write_text("original")
    (root / "dirlink").symlink_to(outside)
    (root / "filelink").symlink_to(target)
    os.mkfifo(root / "fifo")
    (root / "sub").mkdir()
    (root / "sub" / "ok.txt").write_text("fine")

    # writes: a link on the way is refused, a link at the end is replaced, never written through
    with pytest.raises(safefs.UnsafePath):
        safefs.write_text(root, "dirlink/new.txt", "x")
    assert not (outside / "new.txt").exists()
    safefs.write_text(root, "filelink", "replaced")
    assert target.read_text() == "original" and not (root / "filelink").is_symlink()
    assert (root / "filelink").read_text() == "replaced"
    with pytest.raises(safefs.UnsafePath):
        safefs.write_text(root, "../escape.txt", "x")

    # reads: links refused, FIFOs refused without blocking, sizes capped
    with pytest.raises(safefs.UnsafePath):
        safefs.read_text(root, "dirlink/victim.txt")
    t0 = time.monotonic()
    with pytest.raises(safefs.UnsafePath):
        safefs.read_text(root, "fifo")
    assert time.monotonic() - t0 < 1.0
    (root / "big").write_bytes(b"x" * 2000)
    with pytest.raises(safefs.UnsafePath):
        safefs.read_bytes(root, "big", max_bytes=1000)
    assert safefs.read_text(root, "sub/ok.txt") == "fine"
    assert safefs.list_dir(root, "dirlink") is None and safefs.list_dir(root, "sub") == ["ok.txt"]

    # walks: regular files only, links not descended
    assert sorted(f.rel for f in safefs.walk_files(root)) == ["big", "filelink", "sub/ok.txt"]

    # copies: a link or a FIFO anywhere refuses the copy, and nothing is left behind
    for bad in ("dirlink", "filelink", "fifo"):
        src = tmp_path / f"ckpt-{bad}"
        src.mkdir()
        (src / "a.txt").write_text("a")
        if bad == "fifo":
            os.mkfifo(src / bad)
        else:
            (src / bad).symlink_to(outside if bad == "dirlink" else target)
        with pytest.raises(safefs.CopyRefused):
            safefs.copy_tree(tmp_path, src.name, tmp_path / f"copy-{bad}", max_bytes=10 ** 6)
        assert not (tmp_path / f"copy-{bad}").exists()
    src = tmp_path / "ckpt-sparse"
    src.mkdir()
    with open(src / "sparse.bin", "wb") as f:
        f.truncate(50 * 10 ** 6)  # 50 MB that take no disk: counted by the bytes read
    with pytest.raises(safefs.CopyRefused, match="limit"):
        safefs.copy_tree(tmp_path, src.name, tmp_path / "copy-sparse", max_bytes=10 ** 6)

    # chown of a link changes the link, not the file it points to
    from rlbench.sandbox.ownership import give_to_sandbox

    if os.geteuid() == 0:
        (root / "l2").symlink_to(target)
        give_to_sandbox(root / "l2")
        assert target.stat().st_uid == 0 and os.lstat(root / "l2").st_uid == 65534


def test_checkpoint_is_copied_before_it_is_validated_so_a_swap_race_gets_nothing_in(tmp_path):
    """Hole 6: a file of the checkpoint flips between a plain file and a link to a host file while
    the grader copies and checks it; no copy ever holds the host file's bytes."""
    from rlbench.grading.validate import validate_checkpoint
    from rlbench.models.zoo import resolve_model

    base = Path(resolve_model(TINY).location)
    secret = _host_secret(tmp_path)
    ws = tmp_path / "ws"
    ckpt = ws / "ckpt"
    import shutil

    shutil.copytree(base, ckpt)
    stop = threading.Event()

    def swap() -> None:
        extra = ckpt / "extra.json"
        while not stop.is_set():
            extra.unlink(missing_ok=True)
            extra.symlink_to(secret)
            time.sleep(0.0003)
            extra.unlink(missing_ok=True)
            extra.write_text("{}")
            time.sleep(0.0003)

    t = threading.Thread(target=swap, daemon=True)
    t.start()
    outcomes = []
    try:
        for i in range(12):
            copy = tmp_path / "copies" / f"{i:03d}"
            v = validate_checkpoint(ckpt, ws, base, copy, max_bytes=10 ** 8)
            outcomes.append(v.ok)
            if v.ok:  # caught between two swaps, or as the plain file (empty if read between its open and write)
                assert not (copy / "extra.json").exists() or (copy / "extra.json").read_bytes() in (b"", b"{}")
            else:
                assert "link" in v.reason or "not exist" in v.reason or "cannot" in v.reason, v.reason
                assert not copy.exists()
    finally:
        stop.set()
        t.join()
    leaked = [p for p in (tmp_path / "copies").rglob("*") if p.is_file() and SECRET in p.read_bytes()]
    assert not leaked, leaked


# cells, through the tools ----------------------------------------------------------------------
@needs_bwrap
@pytest.mark.slow
def test_planted_links_never_make_the_root_harness_write_outside(tmp_path, ray_cluster):
    """Hole 1: the python tool's script path, write's path and folder planted as links to host
    files; the host files keep their bytes and owner, and the calls are recorded."""
    secret = _host_secret(tmp_path)
    folder = tmp_path / "hostdir"
    folder.mkdir()
    r = _cell(tmp_path, "hostile_files:LinkPlanter",
              agent_options={"target_file": str(secret), "target_dir": str(folder)})
    assert r.status == "ok", r
    assert secret.read_bytes() == SECRET and secret.stat().st_uid == 0 and stat.S_IMODE(secret.stat().st_mode) == 0o600
    assert list(folder.iterdir()) == []
    steps = [json.loads(line) for line in (Path(r.cell_dir) / "trajectory.jsonl").read_text().splitlines()]
    by_tool = [(s["tool"], s["result"]) for s in steps]
    pythons = [res for tool, res in by_tool if tool == "python"]
    assert "first script" in pythons[0]["stdout"] and "second script" in pythons[1]["stdout"]  # the link replaced
    assert not pythons[2]["ok"] and "link" in pythons[2]["error"]  # the folder itself a link: refused
    writes = [res for tool, res in by_tool if tool == "write"]
    assert not writes[0]["ok"] and "link" in writes[0]["error"] and writes[1]["ok"]
    reads = [res for tool, res in by_tool if tool == "read"]
    assert not reads[0]["ok"] and reads[1]["content"] == "replaces the link, not its target"
    ws = Path(r.cell_dir) / "workspace"
    assert (ws / "notes.txt").is_file() and not (ws / "notes.txt").is_symlink()


@needs_bwrap
@pytest.mark.slow
@pytest.mark.timeout(900)
def test_fifos_and_sparse_files_never_hang_the_cell_or_its_report(tmp_path, ray_cluster):
    """Hole 4: FIFOs and 1.9 GB sparse files where the harness reads after the agent (step logs,
    the decoy scan, method detection); the cell and its report finish."""
    from rlbench.reports.cell_html import write_cell_report

    t0 = time.monotonic()
    r = _cell(tmp_path, "hostile_files:FifoPlanter")
    assert r.status == "ok", r
    assert r.integrity["verdict"] in ("clean", "suspicious") and r.stage_failures is None, r
    html, _ = write_cell_report(Path(r.cell_dir))
    assert html.is_file()
    assert time.monotonic() - t0 < 600
    steps = [json.loads(line) for line in (Path(r.cell_dir) / "trajectory.jsonl").read_text().splitlines()]
    assert steps[0]["result"]["ok"], steps[0]  # every special file was made
    read = next(s for s in steps if s["tool"] == "read")
    assert not read["result"]["ok"] and "regular" in read["result"]["error"]


@needs_bwrap
@pytest.mark.slow
def test_swap_race_from_inside_the_sandbox_puts_no_host_file_in_a_checkpoint(tmp_path, ray_cluster):
    """Hole 6, as an agent does it: `./grade submit` while a background process swaps a file of
    the checkpoint with a link to a host file (here the hidden test split's metadata)."""
    from rlbench.data.splits import prepare_data, split_path
    from rlbench.tasks.registry import load_task, task_dir

    task = load_task(TINY)
    prepare_data(task, task_dir(TINY))
    hidden = split_path(task, "test") / "rlbench_split.json"
    marker = json.loads(hidden.read_text())["fingerprint"].encode()
    r = _cell(tmp_path, "hostile_files:SwapRacer", agent_options={"target_file": str(hidden)})
    assert r.submissions["total"] == 5, r.submissions
    subs = Path(r.cell_dir) / "submissions"
    files = [p for p in subs.rglob("*") if p.is_file()] if subs.is_dir() else []
    assert not [p for p in files if marker in p.read_bytes()]
    assert not [p for p in files if p.is_symlink()]
    for refused in r.submissions["refused"]:
        # the swap lands before the copy (a link), or mid-way (the file vanished between listing and opening)
        assert any(w in refused["reason"] for w in ("link", "not exist", "No such file")), refused


@needs_bwrap
@pytest.mark.slow
def test_snapshots_stay_small_see_past_gitignore_and_never_lose_a_call(tmp_path, ray_cluster):
    """Hole 7 and the .gitignore half of hole 8."""
    r = _cell(tmp_path, "hostile_files:SnapshotBloater")
    cell = Path(r.cell_dir)
    assert r.status == "ok", r
    steps = [json.loads(line) for line in (cell / "trajectory.jsonl").read_text().splitlines()]
    assert len(steps) == r.agent_run["tool_calls"] == 3 and steps[0]["result"]["ok"], steps[0]
    size = sum(p.stat().st_size for p in (cell / "snapshots.git").rglob("*") if p.is_file())
    assert size < 10 * 1024 ** 2, size
    git = ["git", "-c", "safe.directory=*", f"--git-dir={cell / 'snapshots.git'}"]
    shown = subprocess.run(git + ["show", "HEAD:train.py"], capture_output=True, text=True, timeout=60)
    assert "the agent code" in shown.stdout, shown.stderr
    files = subprocess.run(git + ["ls-tree", "-r", "--name-only", "HEAD"], capture_output=True, text=True,
                           timeout=60).stdout.split()
    assert "sparse.txt" not in files and "dense.txt" not in files and len(files) <= 5000


def test_a_failed_snapshot_still_records_the_call(tmp_path):
    from rlbench.record import SnapshotError
    from rlbench.harness.tools import ToolBox
    from rlbench.sandbox import SandboxConfig

    ws, cell = tmp_path / "ws", tmp_path / "cell"
    ws.mkdir()
    cell.mkdir()
    tools = ToolBox(cell, ws, "", SandboxConfig(mode="none"), budget_s=60)

    def broken(message: str) -> str:
        raise SnapshotError("git add took over 60 s")

    tools.snapshots.commit = broken
    tools._record("exec", {"command": "true"}, {"ok": True}, time.monotonic(), 0.0, True)
    line = json.loads((tmp_path / "cell" / "trajectory.jsonl").read_text().splitlines()[-1])
    assert line["tool"] == "exec" and line["snapshot"] is None and "over 60 s" in line["snapshot_error"]


@needs_bwrap
@pytest.mark.slow
def test_decoys_read_through_hard_links_and_globs_are_seen(tmp_path, ray_cluster):
    """Hole 8: the decoy watch follows the inode, not the path."""
    r = _cell(tmp_path, "hostile_files:HardLinkReader")
    integrity = r.integrity
    kinds = {e["event"] for e in integrity["events"]}
    assert "decoy_opened" in kinds, integrity
    opened = {e["path"] for e in integrity["events"] if e["event"] == "decoy_opened"}
    assert opened == {d["path"] for d in integrity["decoys"]}, (opened, integrity["decoys"])
    assert integrity["verdict"] != "clean"


def test_remove_tree_never_follows_a_link_on_the_way(tmp_path):
    from rlbench import safefs

    ws, outside = tmp_path / "ws", tmp_path / "outside"
    (ws / "sweeps").mkdir(parents=True)
    (outside / "trial").mkdir(parents=True)
    (outside / "trial" / "keep.txt").write_text("host data")
    (ws / "sweeps" / "001").symlink_to(outside)  # planted after the harness made the folder
    safefs.remove_tree(ws, "sweeps/001/trial")
    assert (outside / "trial" / "keep.txt").read_text() == "host data"
    (ws / "sweeps" / "002" / "trial").mkdir(parents=True)
    (ws / "sweeps" / "002" / "trial" / "link").symlink_to(outside)
    safefs.remove_tree(ws, "sweeps/002/trial")
    assert not (ws / "sweeps" / "002" / "trial").exists() and (outside / "trial" / "keep.txt").exists()


@needs_bwrap
def test_sandbox_tmp_is_private_writable_and_capped(tmp_path):
    """The sandbox's /tmp and /dev/shm: writable by the sandbox uid (tempfile works), capped at
    limits.tmp_mb, and gone with the call."""
    from rlbench.sandbox import Sandbox, SandboxConfig

    ws = tmp_path / "ws"
    ws.mkdir()
    os.chmod(ws, 0o777)
    box = Sandbox(ws, SandboxConfig(tmp_mb=64), cell_budget_s=60)
    r = box.run("python -c 'import tempfile; print(tempfile.mkdtemp())' && touch /dev/shm/x && "
                "head -c 100000000 /dev/zero > /tmp/big; echo rc=$?", timeout=60)
    assert r.stdout.startswith("/tmp/") and "rc=1" in r.stdout, (r.stdout, r.stderr)
    assert "No space left" in r.stderr
    # the harness's own read-only mounts (the project's code and virtualenv, when they live under
    # /tmp) and the folders leading to them are there by design; nothing the last call wrote is
    import shlex

    from rlbench.sandbox.runner import _project_mounts

    mounts = [str(m) for m in _project_mounts()]
    prune = " ".join(f"-path {shlex.quote(m)} -prune -o" for m in mounts)
    again = box.run(f"find /tmp /dev/shm -mindepth 1 {prune} -print", timeout=30)
    left = [line for line in again.stdout.split() if not any(m.startswith(line + "/") for m in mounts)]
    assert not left, left[:20]
