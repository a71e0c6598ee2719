"""The reference capacity score: pure numpy, no I/O. The streaming scorer must match it."""
