"""Allocation intervals -> the time from which load counts."""

import math

import pytest

from fairlane_scoring.allocation import MIB, Allocation, Held, held_at, load_since_ms


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


def test_a_fractional_allocation_does_not_mask_load() -> None:
    """A share of the GPU (issue 29): its tenants' part is discounted (held_at), the rest
    of the load still counts, so load history neither stops nor restarts for it."""
    allocations = [Allocation(500, 800, share=0.5), Allocation(900, share=0.25)]
    assert load_since_ms(allocations, 1_000) == -math.inf
    assert load_since_ms([*allocations, Allocation(100, 300)], 1_000) == 300


@pytest.mark.parametrize(
    ("allocations", "ts_ms", "expected"),
    [
        ([], 1_000, Held()),
        ([Allocation(500)], 1_000, Held()),  # a whole GPU is masked, not discounted
        ([Allocation(500, share=0.25, memory_mib=1024)], 1_000, Held(0.25, 1024 * MIB)),
        ([Allocation(500, 800, share=0.25, memory_mib=1024)], 1_000, Held()),  # ended
        ([Allocation(1_500, share=0.25)], 1_000, Held()),  # starts later
        (
            [Allocation(500, share=0.5, memory_mib=10), Allocation(600, share=0.25)],
            1_000,
            Held(0.75, 10 * MIB),  # a share without memory holds none
        ),
        ([Allocation(0, share=0.75), Allocation(0, share=0.5)], 1_000, Held(1.0, 0)),  # capped
    ],
)
def test_held_at_sums_the_fractional_tenants_at_that_time(
    allocations: list[Allocation], ts_ms: int, expected: Held
) -> None:
    assert held_at(allocations, ts_ms) == expected
