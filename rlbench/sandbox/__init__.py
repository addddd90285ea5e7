"""Where every command an agent runs executes: bubblewrap, or nothing at all (marked unsandboxed)."""

from rlbench.sandbox.runner import ExecResult, Sandbox, SandboxConfig, SandboxUnavailable, bwrap_path, require_bwrap

__all__ = ["ExecResult", "Sandbox", "SandboxConfig", "SandboxUnavailable", "bwrap_path", "require_bwrap"]
