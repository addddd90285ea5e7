"""Task data: procedural generators, split building, fingerprints and storage."""
