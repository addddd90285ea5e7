"""The harness: one benchmark cell (workspace, sandboxed tools, grading, judge)."""
