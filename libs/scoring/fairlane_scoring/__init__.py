"""The reference capacity score: pure numpy, no I/O. The streaming scorer must match it.

docs/scoring.md states every formula and default; ``reference.py`` lists the steps.
"""
