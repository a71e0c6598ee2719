"""Group commit of new placements: those a replica decided in one turn of its event
loop are written together, one statement and one transaction for all of them (one
round trip, one WAL flush), each answered on its own.

A batch leaves at the next turn of the loop, whatever else is in flight: nothing waits
for a batch to fill or for an earlier one to end (holding reservations longer would
refuse other requests on a full fleet), yet under load, when one turn handles many
requests, the batch grows with it. A GPU or port another replica holds rolls back that
placement alone (its waiter gets :class:`AllocationConflictError` and retries); the
others commit. A waiter that gives up does not cancel the batch: the write goes on and
its outcome is dropped, as it would be for a single statement in flight.
"""

from __future__ import annotations

import asyncio

from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.errors import AllocationConflictError
from fairlane_scheduler.storage import PlacementStore, WriteOutcome

__all__ = ["GroupCommit"]


_Waiter = tuple[Placement, PlacementRequest, "asyncio.Future[WriteOutcome]"]


class GroupCommit:
    def __init__(self, store: PlacementStore, ports: PortRange) -> None:
        self._store = store
        self._ports = ports
        self._queued: list[_Waiter] = []
        self._flusher: asyncio.Task[None] | None = None  # the batch still taking requests
        self._in_flight: set[asyncio.Task[None]] = set()  # the loop keeps weak references
        self.batches = 0  # writes issued
        self.placements = 0  # placements they carried

    async def create(self, placement: Placement, request: PlacementRequest) -> WriteOutcome:
        """As :meth:`PlacementStore.create`, in the next batch."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[WriteOutcome] = loop.create_future()
        self._queued.append((placement, request, future))
        if self._flusher is None:
            self._flusher = loop.create_task(self._flush(), name="group-commit")
            self._in_flight.add(self._flusher)
            self._flusher.add_done_callback(self._in_flight.discard)
        return await future

    async def _flush(self) -> None:
        batch, self._queued, self._flusher = self._queued, [], None
        self.batches += 1
        self.placements += len(batch)
        await self._write(batch)

    async def _write(self, batch: list[_Waiter]) -> None:
        try:
            outcomes = await self._outcomes(batch)
        except asyncio.CancelledError:
            for _, _, future in batch:
                future.cancel()
            raise
        except Exception as exc:  # noqa: BLE001 - every waiter gets the store's error
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)
            return
        for (placement, _, future), outcome in zip(batch, outcomes, strict=True):
            if future.done():  # its waiter gave up
                continue
            if outcome is None:
                taken = f"placement {placement.id}: a GPU or its port is live elsewhere"
                future.set_exception(AllocationConflictError(taken))
            else:
                future.set_result(outcome)

    async def _outcomes(self, batch: list[_Waiter]) -> list[WriteOutcome | None]:
        if len(batch) > 1:
            return await self._store.create_many([(p, r) for p, r, _ in batch], self._ports)
        placement, request, _ = batch[0]
        try:
            return [await self._store.create(placement, request, self._ports)]
        except AllocationConflictError:
            return [None]
