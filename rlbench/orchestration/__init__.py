"""Suites of cells on a Ray cluster: expand the matrix, run cells in parallel, resume."""
