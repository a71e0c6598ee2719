"""Seeded, deterministic GPU fleet simulator (pure: no clock, no I/O)."""
