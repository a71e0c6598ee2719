"""Group commit of placement writes: the new placements (and, apart, the releases and
expiries) a replica handled in one turn of its event loop are written together, one
statement and one transaction for all of them (one round trip, one WAL flush), each
answered on its own.

A batch leaves at the next turn of the loop, whatever else is in flight, or at once when
it holds ``max_items``: its statement is sent before the request that filled it yields,
so while Postgres writes and commits it, the requests after it in the same turn are
decided and form the next batch (a second batch in flight). Without the cap, clients
that wait on one batch fall into lock step: all of them are answered together, decide
together, and the process idles while each batch is written. Nothing waits for a batch
to fill or for an earlier one to end (holding reservations longer would refuse other
requests on a full fleet). The view's reservations keep batches in flight off each
other's GPUs and ports; Postgres's constraints stay the arbiter.

A GPU or port another replica holds rolls back that placement alone (its waiter gets
:class:`AllocationConflictError` and retries); the others commit. Two batches can
deadlock on each other's rows; Postgres then rolls one back whole, and its placements
retry as after a lost race, its endings are written again. A waiter that gives up does
not cancel the batch, not even the one that sent it: the write goes on in a task of its
own and its outcome is dropped, as it would be for a single statement in flight.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator, Sequence
from typing import Any, Generic, TypeVar

from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.errors import AllocationConflictError
from fairlane_scheduler.storage import Ending, PlacementStore, WriteOutcome

__all__ = ["BATCH_MAX", "GroupCommit", "GroupEnd"]

#: Items one write carries by default: two batches of 8 keep 16 clients overlapped
#: (docs/benchmarks-history.md), and a batch stays a few milliseconds of Postgres work.
BATCH_MAX = 8

_END_ATTEMPTS = 3
_Item = TypeVar("_Item")
_Answer = TypeVar("_Answer")


class _LoopBatches(Generic[_Item, _Answer]):
    """Items submitted in one turn of the loop, written by one :meth:`_answers` call."""

    def __init__(self, max_items: int) -> None:
        if max_items < 1:
            raise ValueError(f"a batch carries at least one item, not {max_items}")
        self._max_items = max_items
        self._queued: list[tuple[_Item, asyncio.Future[_Answer]]] = []
        self._flusher: asyncio.Task[None] | None = None  # flushes what the turn leaves queued
        self._in_flight: set[asyncio.Future[None]] = set()  # the loop keeps weak references
        self.batches = 0  # writes issued
        self.items = 0  # items they carried

    async def _submit(self, item: _Item) -> _Answer:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[_Answer] = loop.create_future()
        self._queued.append((item, future))
        if len(self._queued) >= self._max_items:
            self._track(_start_now(self._flush()))
        elif self._flusher is None:
            self._flusher = loop.create_task(self._flush_at_turn_end(), name=type(self).__name__)
            self._track(self._flusher)
        return await future

    def _track(self, flushing: asyncio.Future[None]) -> None:
        self._in_flight.add(flushing)
        flushing.add_done_callback(self._in_flight.discard)

    async def _flush_at_turn_end(self) -> None:
        self._flusher = None
        if self._queued:  # else a full batch took them all
            await self._flush()

    async def _flush(self) -> None:
        batch, self._queued = self._queued, []
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
    def __init__(self, store: PlacementStore, ports: PortRange, max_items: int) -> None:
        super().__init__(max_items)
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
    def __init__(self, store: PlacementStore, max_items: int) -> None:
        super().__init__(max_items)
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


def _start_now(flushing: Coroutine[Any, Any, None]) -> asyncio.Future[None]:
    """Run ``flushing`` up to its first suspension now, in the caller's step (so a
    statement is on the socket before the caller yields), and the rest in a task of its
    own that the caller's cancellation does not reach: Python 3.12's eager tasks, by
    hand, for 3.11."""
    loop = asyncio.get_running_loop()
    try:
        suspended_on = flushing.send(None)
    except StopIteration:  # nothing to wait for (an in-memory store)
        finished: asyncio.Future[None] = loop.create_future()
        finished.set_result(None)
        return finished
    return loop.create_task(_rest(flushing, suspended_on), name="GroupFlush")


async def _rest(started: Coroutine[Any, Any, None], suspended_on: object) -> None:
    await _Resumed(started, suspended_on)


class _Resumed:
    """Awaiting it drives a coroutine that was started by hand, from where it suspended:
    the task sees the future it waits on, and its wake-ups (a result, an exception,
    a cancellation) are passed on as they would be to the coroutine itself."""

    def __init__(self, started: Coroutine[Any, Any, None], suspended_on: object) -> None:
        self._started = started
        self._suspended_on = suspended_on

    def __await__(self) -> Generator[Any, None, None]:
        suspended_on = self._suspended_on
        while True:
            thrown: BaseException | None = None
            try:
                yield suspended_on
            except GeneratorExit:  # this wrapper is closed: close the coroutine too
                self._started.close()
                raise
            except BaseException as exc:  # noqa: BLE001 - thrown in by the task: pass it on
                thrown = exc
            try:
                if thrown is None:
                    suspended_on = self._started.send(None)
                else:
                    suspended_on = self._started.throw(thrown)
            except StopIteration:
                return
