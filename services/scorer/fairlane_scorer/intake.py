"""The records waiting for one agent's batches, handed over a fetch at a time.

Faust delivers a record to an agent through a per-record path: its fetch loop awaits two
tasks per record (``wait_first`` of the delivery and of the flow's suspension), its
conductor decodes each into an event and queues it, the stream iterates the events one
by one and the agent queued them again for the batches: about a quarter of the worker's
main thread at a backlog (docs/scoring.md, "Where the worker's time goes"). The
scorer's consumer (:mod:`fairlane_scorer.consumer`) hands the records of an agent's
topics straight to its :class:`Intake` instead, all records of one fetch in one call,
and the batches take them from there.

An intake has a capacity, not a hard bound: a fetch's records are put all at once, and
the consumer waits for room before it hands over the next fetch's.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Iterable

from faust.types import Message

__all__ = ["Intake"]


class Intake:
    def __init__(self, capacity: int) -> None:
        self._items: deque[Message] = deque()
        self._capacity = capacity
        self._arrived = asyncio.Event()  # set while records wait
        self._room = asyncio.Event()  # set while fewer than the capacity wait
        self._room.set()
        self._unfinished = 0  # put, not yet reported done
        self._finished = asyncio.Event()
        self._finished.set()

    def __len__(self) -> int:
        return len(self._items)

    def put(self, messages: Iterable[Message]) -> None:
        """Queue ``messages`` (in order), however many wait already."""
        before = len(self._items)
        self._items.extend(messages)
        added = len(self._items) - before
        if not added:
            return
        self._unfinished += added
        self._finished.clear()
        self._arrived.set()
        if len(self._items) >= self._capacity:
            self._room.clear()

    def has_room(self) -> bool:
        return len(self._items) < self._capacity

    async def wait_room(self) -> None:
        await self._room.wait()

    async def take(
        self, max_records: int, within_s: float, timeout_s: float | None
    ) -> list[Message]:
        """Up to ``max_records`` records, waiting at most ``within_s`` to fill the batch
        once one is there; empty when none came within ``timeout_s`` (None: wait)."""
        if not self._items:
            try:
                await asyncio.wait_for(self._arrived.wait(), timeout_s)
            except TimeoutError:
                return []
        batch = self._pop(max_records)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + within_s
        while len(batch) < max_records:
            if not self._items:
                remaining = deadline - loop.time()
                if remaining <= 0:
                    break
                try:
                    await asyncio.wait_for(self._arrived.wait(), remaining)
                except TimeoutError:
                    break
            batch += self._pop(max_records - len(batch))
        return batch

    def done(self, count: int) -> None:
        """``count`` records taken are finished with (reported, or passed over)."""
        self._unfinished -= count
        if self._unfinished <= 0:
            self._unfinished = 0
            self._finished.set()

    async def join(self) -> None:
        """Wait until every record put is finished with."""
        await self._finished.wait()

    def _pop(self, count: int) -> list[Message]:
        items = self._items
        taken = [items.popleft() for _ in range(min(count, len(items)))]
        if not items:
            self._arrived.clear()
        if len(items) < self._capacity:
            self._room.set()
        return taken
