"""The states a GPU row is in for a placement and the columns of a node's tally, shared
by the numpy summaries (core/node_summary.py) and the plain-Python ones
(core/few_nodes.py)."""

from __future__ import annotations

__all__ = [
    "ALLOCATED",
    "BACK_S",
    "BELOW",
    "BEST_BELOW",
    "COOLING",
    "CORDONED",
    "FREE",
    "HEALTHY",
    "NOT_DUE",
    "STALE",
    "STATIC",
    "TALLY_WIDTH",
]

FREE, ALLOCATED, CORDONED, STALE, BELOW, COOLING, STATIC = range(7)  # states; tally columns
#: More tally columns: GPUs of an allowed model and size with a score above 0; the best
#: score below the threshold in hundredths (-100: none); the latest recovery of a cooling
#: GPU in seconds (NEVER // 1000: none).
HEALTHY, BEST_BELOW, BACK_S = 7, 8, 9
TALLY_WIDTH = 10
NOT_DUE = 2**62  # "never" for a node's due time, exact as a float too
