"""The bounded backlog of samples not yet acknowledged by Kafka.

While the broker is away the agent keeps sampling into this backlog; when it returns,
the backlog goes out oldest first. Bounded twice: by count (memory) and by age (a
sample older than ``max_age_s`` no longer says anything useful about the GPU, and the
scorer's window would ignore it anyway). Overflow drops the oldest samples, never the
newest, and every drop is counted by reason.

Order per node is the invariant that matters downstream. :meth:`Backlog.take_batch`
hands out at most one sample per node, so a partly failed batch can be put back with
:meth:`Backlog.put_back` without ever reordering a node's samples or resending one that
was delivered. The price is head-of-line blocking: a sample that keeps failing holds
back those behind it. Kafka failures are mostly all-or-nothing (the broker is away), and
ordered, complete history is what the scorer's windows need.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

from fairlane_events.records import NodeSample

__all__ = ["Backlog", "BacklogLimits", "Drops"]


@dataclass(frozen=True)
class BacklogLimits:
    max_samples: int = 100_000
    max_age_s: float = 3600.0

    def __post_init__(self) -> None:
        if self.max_samples < 1 or self.max_age_s <= 0:
            raise ValueError("backlog limits must be positive")


@dataclass(frozen=True)
class Drops:
    """Samples dropped by one call, by reason."""

    overflow: int = 0
    expired: int = 0


class Backlog:
    """FIFO of node samples; ``len()`` is what waits to be sent."""

    def __init__(self, limits: BacklogLimits) -> None:
        self.limits = limits
        self._queue: deque[NodeSample] = deque()

    def __len__(self) -> int:
        return len(self._queue)

    def add(self, samples: list[NodeSample], now_ms: int) -> Drops:
        """Append a round; drop what is too old, then the oldest beyond the size limit."""
        self._queue.extend(samples)
        expired = self.expire(now_ms)
        overflow = max(0, len(self._queue) - self.limits.max_samples)
        for _ in range(overflow):
            self._queue.popleft()
        return Drops(overflow=overflow, expired=expired)

    def expire(self, now_ms: int) -> int:
        """Drop samples older than ``max_age_s`` at ``now_ms``; return how many."""
        oldest_ok = now_ms - self.limits.max_age_s * 1000
        dropped = 0
        while self._queue and self._queue[0].ts_ms < oldest_ok:
            self._queue.popleft()
            dropped += 1
        return dropped

    def take_batch(self, max_records: int) -> list[NodeSample]:
        """Remove and return the oldest samples, at most ``max_records`` and one per node."""
        batch: list[NodeSample] = []
        nodes: set[str] = set()
        while self._queue and len(batch) < max_records and self._queue[0].node not in nodes:
            sample = self._queue.popleft()
            nodes.add(sample.node)
            batch.append(sample)
        return batch

    def put_back(self, failed: list[NodeSample]) -> None:
        """Return the failed part of a batch to the front, in its original order."""
        self._queue.extendleft(reversed(failed))
