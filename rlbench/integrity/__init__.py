"""Integrity checks: decoys, reward hacking, lineage, the verdict a cell report shows."""
