"""Agent-proposed designs and the Ray Tune sweeps the harness runs for them."""
