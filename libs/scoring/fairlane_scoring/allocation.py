"""Fairlane's own allocations of a GPU, as the score sees them (load masking)."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Allocation", "load_since_ms"]


@dataclass(frozen=True)
class Allocation:
    """Fairlane held the GPU over [start_ms, end_ms); ``end_ms`` None: still holds it."""

    start_ms: int
    end_ms: int | None = None

    def holds_at(self, now_ms: int) -> bool:
        return self.start_ms <= now_ms and (self.end_ms is None or now_ms < self.end_ms)


def load_since_ms(allocations: Iterable[Allocation], now_ms: int) -> float:
    """The time from which samples' load components count at ``now_ms``:

    +inf                       while an allocation holds the GPU (load is our own job's)
    max(end_ms of allocations ended by now_ms)     (load history restarts at the release)
    -inf                       when Fairlane never held it (all load is interference)
    """
    since = -math.inf
    for allocation in allocations:
        if allocation.holds_at(now_ms):
            return math.inf
        if allocation.end_ms is not None and allocation.end_ms <= now_ms:
            since = max(since, allocation.end_ms)
    return since
