"""Run reports and leaderboards: what an agent did, and how agents compare (HTML + JSON + CSV)."""
