"""Allocation intervals -> the time from which load counts."""

import math

import pytest

from fairlane_scoring.allocation import Allocation, load_since_ms


@pytest.mark.parametrize(
    ("allocations", "now_ms", "expected"),
    [
        ([], 1_000, -math.inf),  # never ours: all load is interference
        ([Allocation(500)], 1_000, math.inf),  # ours now: all load is our job's
        ([Allocation(500, 800)], 1_000, 800),  # released: load history restarts at 800
        ([Allocation(500, 800)], 700, math.inf),  # seen at 700 it was still held
        ([Allocation(500, 800), Allocation(900, 950)], 1_000, 950),
        ([Allocation(500, 800), Allocation(900)], 1_000, math.inf),
        ([Allocation(1_500)], 1_000, -math.inf),  # starts later
    ],
)
def test_load_since(allocations: list[Allocation], now_ms: int, expected: float) -> None:
    assert load_since_ms(allocations, now_ms) == expected
