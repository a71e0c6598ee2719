"""The simulator and the analysis (pure: simulated time, seeded randomness, no I/O)."""
