"""`rlbench agents install NAME`: a coding-agent CLI installed where the sandbox can run it.

Each CLI gets its own folder under RLBENCH_HOME/agents/NAME (an npm prefix, or a virtualenv for a
PyPI package), which the cell's sandbox mounts read-only at the same path, so nothing the agent
does can change the program it runs as. The folder counts as installed only once `installed.json`
is written, last: an install cut off midway is redone, never run.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from rlbench.agents.cli_registry import CliSpec, cli_spec, registry
from rlbench.config.core import ConfigError
from rlbench.io import atomic_write_json, file_lock, read_json, utc_now
from rlbench.paths import home

MARKER = "installed.json"
INSTALL_TIMEOUT_S = 1800


def agents_root() -> Path:
    return home() / "agents"


def install_dir(name: str) -> Path:
    return agents_root() / name


def bin_path(spec: CliSpec, folder: Path) -> Path:
    if spec.package_kind == "npm":
        return folder / "node_modules" / ".bin" / spec.bin
    return folder / "venv" / "bin" / spec.bin


@dataclass
class Installed:
    name: str
    folder: Path
    executable: Path
    source: str  # what was installed: PKG@VERSION, or the local folder or archive given
    installed: str  # UTC time


def installed(name: str) -> Installed | None:
    """The CLI's install, or None when it is missing or was cut off midway."""
    spec = cli_spec(name)
    folder = install_dir(name)
    marker = folder / MARKER
    if not marker.is_file():
        return None
    meta = read_json(marker)
    exe = bin_path(spec, folder)
    if not exe.exists():
        return None
    return Installed(name, folder, exe, str(meta.get("source", "")), str(meta.get("installed", "")))


def _tool(name: str, why: str) -> str:
    path = shutil.which(name)
    if path is None:
        raise ConfigError(f"{why} needs `{name}` on PATH (make setup installs Node.js and npm where they are missing)")
    return path


def install(name: str, source: str = "", log=print) -> Installed:
    """Install CLI `name` at its pinned version, or from `source` (another version spec, or a local
    npm package folder or tarball, or a local wheel: the way to install without the registry, and
    how the tests install their fakes of each CLI)."""
    spec = cli_spec(name)
    folder = install_dir(name)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with file_lock(folder.with_name(f".{name}.lock")):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        started = time.monotonic()
        if spec.package_kind == "npm":
            target = source or f"{spec.package_name}@{spec.version}"
            argv = [_tool("npm", f"installing {name}"), "install", "--prefix", str(folder), "--no-audit", "--no-fund",
                    "--omit=dev", "--install-links", target]
        else:
            target = source or f"{spec.package_name}=={spec.version}"
            subprocess.run([sys.executable, "-m", "venv", str(folder / "venv")], check=True, timeout=300)
            argv = [str(folder / "venv" / "bin" / "python"), "-m", "pip", "install", "--disable-pip-version-check",
                    target]
        log(f"installing {name} from {target} into {folder}")
        proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=INSTALL_TIMEOUT_S)
        if proc.returncode != 0:
            raise ConfigError(f"installing {name} failed ({' '.join(argv[:2])} ... exit {proc.returncode}):\n"
                              f"{proc.stdout[-3000:]}")
        exe = bin_path(spec, folder)
        if not exe.exists():
            raise ConfigError(f"installing {name} from {target} gave no `{spec.bin}` executable at {exe}")
        for p in [folder, *folder.rglob("*")]:  # readable and runnable by the sandbox's uid, writable by nobody else
            if not p.is_symlink():
                p.chmod((p.stat().st_mode | 0o444 | (0o111 if p.is_dir() or p.stat().st_mode & 0o100 else 0)) & ~0o022)
        atomic_write_json(folder / MARKER, {"name": name, "source": target, "installed": utc_now(),
                                            "seconds": round(time.monotonic() - started, 1)})
    found = installed(name)
    assert found is not None
    return found


def listing() -> list[tuple[CliSpec, Installed | None]]:
    return [(spec, installed(name)) for name, spec in registry().items()]
