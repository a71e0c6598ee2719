"""Charts of the evaluation (matplotlib, Agg backend): they read data and write PNGs, so
they live outside the pure ``core``."""
