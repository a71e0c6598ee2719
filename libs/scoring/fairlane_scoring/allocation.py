"""Fairlane's own allocations of a GPU, as the score sees them (load masking).

A whole allocation masks the GPU's load components: all of its load is its job's. A
fractional one (a share of the GPU's compute and memory, issue 29) masks only its part:
the load components count what is beyond the shares held at the sample's time
(:func:`held_at`, applied by :func:`fairlane_scoring.components.component_scores`),
so a tenant inside its share is not taken for interference, and one that exceeds it,
or an outsider, is.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["MIB", "NOTHING_HELD", "Allocation", "Held", "held_at", "load_since_ms"]

MIB = 2**20


@dataclass(frozen=True)
class Allocation:
    """Fairlane held the GPU over [start_ms, end_ms); ``end_ms`` None: still holds it.
    ``share`` (0 < share <= 1) and ``memory_mib``: a fractional allocation's part of the
    GPU; ``share`` None: the whole GPU."""

    start_ms: int
    end_ms: int | None = None
    share: float | None = None
    memory_mib: int | None = None

    def holds_at(self, now_ms: int) -> bool:
        return self.start_ms <= now_ms and (self.end_ms is None or now_ms < self.end_ms)

    @property
    def is_fractional(self) -> bool:
        return self.share is not None


@dataclass(frozen=True)
class Held:
    """What fractional tenants hold of a GPU at one instant: compute share (0..1) and
    memory bytes."""

    share: float = 0.0
    memory_bytes: int = 0


NOTHING_HELD = Held()


def load_since_ms(allocations: Iterable[Allocation], now_ms: int) -> float:
    """The time from which samples' load components count at ``now_ms``:

    +inf                       while a whole allocation holds the GPU (load is our own job's)
    max(end_ms of whole allocations ended by now_ms)  (load history restarts at the release)
    -inf                       when Fairlane never held it whole (all load counts; the
                               fractional tenants' part is discounted by :func:`held_at`)
    """
    since = -math.inf
    for allocation in allocations:
        if allocation.is_fractional:
            continue
        if allocation.holds_at(now_ms):
            return math.inf
        if allocation.end_ms is not None and allocation.end_ms <= now_ms:
            since = max(since, allocation.end_ms)
    return since


def held_at(allocations: Iterable[Allocation], ts_ms: int) -> Held:
    """The fractional allocations holding the GPU at ``ts_ms``, summed:

    share        = min(1, sum of their shares)
    memory_bytes = sum of their memory_mib x 2^20 (a share without memory holds none)
    """
    share, memory_mib = 0.0, 0
    for allocation in allocations:
        if allocation.share is not None and allocation.holds_at(ts_ms):
            share += allocation.share
            memory_mib += allocation.memory_mib or 0
    if not share:
        return NOTHING_HELD
    return Held(min(1.0, share), memory_mib * MIB)
