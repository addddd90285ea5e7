"""Generation and training engines."""
