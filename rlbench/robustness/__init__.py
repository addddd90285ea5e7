"""The robustness stage: a cell's recipe rerun from the base model across seeds and model sizes."""
