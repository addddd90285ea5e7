"""The package layout is the architecture: pyproject.toml's import-linter contract lists rlbench's
layers, and no module may import from a layer above its own (nor, through it, form a loop)."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(root: Path) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--config", str(root / "pyproject.toml"), "--no-cache"], cwd=root,
                          capture_output=True, text=True, timeout=120, env={"PYTHONPATH": str(root), "PATH": "/usr/bin:/bin"})


def test_rlbench_keeps_its_layers():
    r = _lint(REPO)
    assert r.returncode == 0 and "1 kept, 0 broken" in r.stdout, r.stdout + r.stderr


def test_an_upward_import_breaks_the_contract(tmp_path):
    """The same contract on a copy where a foundation module imports the harness."""
    shutil.copytree(REPO / "rlbench", tmp_path / "rlbench", ignore=shutil.ignore_patterns("canonical", "__pycache__"))
    shutil.copy(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    io = tmp_path / "rlbench" / "io.py"
    io.write_text(io.read_text() + "\n\ndef _late():\n    from rlbench.harness import cell  # noqa: F401\n")
    r = _lint(tmp_path)
    assert r.returncode != 0 and "rlbench.io -> rlbench.harness.cell" in r.stdout, r.stdout + r.stderr
