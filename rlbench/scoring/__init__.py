"""What a result is worth: paired bootstrap intervals, seed aggregates, capability metrics, and
the suite-level normalized scores. Everything here reads harness-written records only."""
