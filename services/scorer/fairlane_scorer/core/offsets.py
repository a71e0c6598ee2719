"""Which offsets of each partition the scorer has processed, and how far a commit may go.

A Kafka commit says "everything before this offset is done". The ledger therefore
commits only the end of the run of processed offsets that starts exactly at the
partition's committed position (its *floor*): an offset that never reached the agents,
or is still being processed, holds every later one back however many of them are done.
Until the floor of a partition is known (its committed position after an assignment)
nothing of it is committed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Iterator
from typing import Generic, TypeVar

__all__ = ["InOrder", "OffsetLedger"]

P = TypeVar("P", bound=Hashable)


class OffsetLedger(Generic[P]):
    def __init__(self) -> None:
        self._floor: dict[P, int] = {}
        self._done: dict[P, set[int]] = {}

    def reset(self, partition: P, floor: int) -> None:
        """The partition's committed position is ``floor`` (after an assignment or a
        seek). Offsets processed at or past it stay done: their output is delivered."""
        self._floor[partition] = floor
        self._done[partition] = {o for o in self._done.get(partition, ()) if o >= floor}

    def retain(self, partitions: Iterable[P]) -> None:
        """Only ``partitions`` are this worker's now: forget the others."""
        keep = set(partitions)
        for partition in set(self._floor) | set(self._done):
            if partition not in keep:
                self._floor.pop(partition, None)
                self._done.pop(partition, None)

    def done(self, partition: P, offset: int) -> None:
        """``offset`` is processed and what it produced is delivered."""
        floor = self._floor.get(partition)
        if floor is None or offset >= floor:
            self._done.setdefault(partition, set()).add(offset)

    def floor(self, partition: P) -> int | None:
        return self._floor.get(partition)

    def committable(self) -> Iterator[P]:
        """The partitions whose floor can move (the offset at the floor is done)."""
        for partition, floor in self._floor.items():
            if floor in self._done.get(partition, ()):
                yield partition

    def advance(self, partition: P) -> int | None:
        """Move the floor over the run of done offsets that starts at it; the new floor
        (the offset to commit: the next one to read), or None when it did not move."""
        start = self._floor.get(partition)
        if start is None:
            return None
        done, floor = self._done.get(partition, set()), start
        while floor in done:
            done.remove(floor)
            floor += 1
        if floor == start:
            return None
        self._floor[partition] = floor
        return floor


class InOrder(Generic[P]):
    """The next offset each partition's records must be processed from, so that no record
    is ever processed after a later one of its partition (the later one would make it
    look like a duplicate, and its sample would be lost for good).

    A partition starts, and starts again after every seek of the consumer (``epoch``
    moved), at its committed position: re-reading what is past it is harmless (a sample
    not newer than its GPU's last one is ignored)."""

    PROCESS, SEEN, HOLE = "process", "seen", "hole"

    def __init__(self) -> None:
        self._next: dict[P, int] = {}
        self._epoch: int | None = None

    def classify(self, partition: P, offset: int, floor: int | None, epoch: int) -> str:
        """PROCESS (the next one), SEEN (before the next one: read again after a rewind),
        or HOLE (records before it are missing: :meth:`expected` says from where)."""
        if epoch != self._epoch:
            self._next.clear()
            self._epoch = epoch
        expected = self._next.get(partition)
        if expected is None:
            # No committed position known yet: take the records as they come.
            self._next[partition] = expected = offset if floor is None else floor
        if offset == expected:
            self._next[partition] = offset + 1
            return self.PROCESS
        return self.SEEN if offset < expected else self.HOLE

    def expected(self, partition: P) -> int | None:
        return self._next.get(partition)

    def resumes_at(self, partition: P, floor: int | None, epoch: int) -> int | None:
        """The offset :meth:`classify` would take next from ``partition``: the expected
        one, or the floor where the consumer was sought since (``epoch`` moved)."""
        if epoch != self._epoch:
            return floor
        expected = self._next.get(partition)
        return floor if expected is None else expected
