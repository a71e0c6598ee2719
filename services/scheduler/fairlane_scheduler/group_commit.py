"""Group commit of placement writes: the new placements (and, apart, the releases and
expiries) a replica handled in one turn of its event loop are written together, one
statement and one transaction for all of them (one round trip, one WAL flush), each
answered on its own.

A batch leaves at the next turn of the loop, whatever else is in flight: nothing waits
for a batch to fill or for an earlier one to end (holding reservations longer would
refuse other requests on a full fleet), yet under load, when one turn handles many
requests, the batch grows with it. A GPU or port another replica holds rolls back that
placement alone (its waiter gets :class:`AllocationConflictError` and retries); the
others commit. Two replicas' batches can deadlock on each other's GPUs; Postgres then
rolls one back whole, and its placements retry as after a lost race, its endings are
written again. A waiter that gives up does not cancel the batch: the write goes on and
its outcome is dropped, as it would be for a single statement in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Generic, TypeVar

from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.errors import AllocationConflictError
from fairlane_scheduler.storage import Ending, PlacementStore, WriteOutcome

__all__ = ["GroupCommit", "GroupEnd"]

_END_ATTEMPTS = 3
_Item = TypeVar("_Item")
_Answer = TypeVar("_Answer")


class _LoopBatches(Generic[_Item, _Answer]):
    """Items submitted in one turn of the loop, written by one :meth:`_answers` call."""

    def __init__(self) -> None:
        self._queued: list[tuple[_Item, asyncio.Future[_Answer]]] = []
        self._flusher: asyncio.Task[None] | None = None  # the batch still taking items
        self._in_flight: set[asyncio.Task[None]] = set()  # the loop keeps weak references
        self.batches = 0  # writes issued
        self.items = 0  # items they carried

    async def _submit(self, item: _Item) -> _Answer:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Answer] = loop.create_future()
        self._queued.append((item, future))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush(), name=type(self).__name__)
            self._in_flight.add(self._flusher)
            self._flusher.add_done_callback(self._in_flight.discard)
        return await future

    async def _flush(self) -> None:
        batch, self._queued, self._flusher = self._queued, [], None
        self.batches += 1
        self.items += len(batch)
        try:
            answers = await self._answers([item for item, _ in batch])
        except asyncio.CancelledError:
            for _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every waiter gets the store's error
            for _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (_, future), answer in zip(batch, answers, strict=True):
            if future.done():  # its waiter gave up
                continue
            if isinstance(answer, Exception):
                future.set_exception(answer)
            else:
                future.set_result(answer)

    async def _answers(self, items: list[_Item]) -> Sequence[_Answer | Exception]:
        raise NotImplementedError


class GroupCommit(_LoopBatches[tuple[Placement, PlacementRequest], WriteOutcome]):
    def __init__(self, store: PlacementStore, ports: PortRange) -> None:
        super().__init__()
        self._store = store
        self._ports = ports

    async def create(self, placement: Placement, request: PlacementRequest) -> WriteOutcome:
        """As :meth:`PlacementStore.create`, in the next batch."""
        return await self._submit((placement, request))

    async def _answers(
        self, items: list[tuple[Placement, PlacementRequest]]
    ) -> list[WriteOutcome | Exception]:
        if len(items) > 1:
            outcomes = await self._store.create_many(items, self._ports)
        else:
            try:
                outcomes = [await self._store.create(*items[0], self._ports)]
            except AllocationConflictError:
                outcomes = [None]
        return [
            _conflict(placement) if outcome is None else outcome
            for (placement, _), outcome in zip(items, outcomes, strict=True)
        ]


def _conflict(placement: Placement) -> AllocationConflictError:
    return AllocationConflictError(f"placement {placement.id}: a GPU or its port is live elsewhere")


class GroupEnd(_LoopBatches[Ending, tuple[Placement | None, bool]]):
    def __init__(self, store: PlacementStore) -> None:
        super().__init__()
        self._store = store

    async def end(self, ending: Ending) -> tuple[Placement | None, bool]:
        """As :meth:`PlacementStore.end`, in the next batch."""
        return await self._submit(ending)

    async def _answers(self, items: list[Ending]) -> list[tuple[Placement | None, bool]]:
        attempt = 1
        while True:
            try:
                if len(items) > 1:
                    return await self._store.end_many(items)
                return [await self._store.end(items[0])]
            except AllocationConflictError:  # rolled back whole (a deadlock): ending is
                if attempt == _END_ATTEMPTS:  # idempotent, so the batch goes again
                    raise
                attempt += 1
