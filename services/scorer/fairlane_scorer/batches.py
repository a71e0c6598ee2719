"""The scorer's own batching over a Faust stream, instead of ``Stream.noack_take``.

The agent's coroutine only moves events from the stream into a bounded queue; a second
task takes what the queue holds (up to ``max_records``, waiting at most ``within_s`` to
fill a batch), runs the handler, waits until the broker has acknowledged everything the
batch produced (:class:`~fairlane_scorer.delivery.Deliveries`), and only then reports
the batch's records processed to the consumer, whose commit never passes an offset that
is not (:mod:`fairlane_scorer.consumer`). ``noack_take`` is not used: its buffer is
filled by a stream processor that reads ``Stream.current_event`` and is cleared by the
consumer of the batch, two tasks sharing one list (docs/scoring.md, "Rebalances and
commits").

Offsets are watched per partition as they reach the handler: one more than an offset
past the last one (and past the committed position) means a record never arrived. That
is logged with the offsets and counted (``fairlane_scorer_delivery_gaps_total``); the
commit stops before such a hole, so a restart reads it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TP, Message, ProducerT

from fairlane_scorer.consumer import ScorerConsumer
from fairlane_scorer.delivery import Deliveries

__all__ = ["BatchHandler", "Batches", "DeliveryOrder", "one_by_one"]

log = logging.getLogger("fairlane.scorer")

BatchHandler = Callable[[list[faust.EventT[Any]], Deliveries], Awaitable[None]]


def one_by_one(handle: Callable[[faust.EventT[Any], Deliveries], Awaitable[None]]) -> BatchHandler:
    """A batch handler that runs ``handle`` on each event in order."""

    async def handle_all(events: list[faust.EventT[Any]], out: Deliveries) -> None:
        for event in events:
            await handle(event, out)

    return handle_all


class DeliveryOrder:
    """The last offset that reached the handler, per partition: finds holes."""

    def __init__(self, floor: Callable[[TP], int | None]) -> None:
        self._floor = floor  # the partition's committed position, when known
        self._last: dict[TP, int] = {}

    def gap(self, tp: TP, offset: int) -> tuple[int, int] | None:
        """The offsets missing before ``offset`` (first, last), if any. Going back is a
        rewind after a seek, not a hole; jumping to the committed position is a
        partition that another worker moved on."""
        last, self._last[tp] = self._last.get(tp), offset
        floor = self._floor(tp)
        if last is None or offset <= last + 1 or (floor is not None and offset <= floor):
            return None
        return last + 1, offset - 1


async def _next_batch(
    queue: asyncio.Queue[faust.EventT[Any]], max_records: int, within_s: float
) -> list[faust.EventT[Any]]:
    batch = [await queue.get()]
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within_s
    while len(batch) < max_records:
        if queue.empty():
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            try:
                batch.append(await asyncio.wait_for(queue.get(), remaining))
            except TimeoutError:
                break
        else:
            batch.append(queue.get_nowait())
    return batch


@dataclass
class Batches:
    """How the batches of one agent are run, and what is told of them."""

    handle: BatchHandler
    consumer: ScorerConsumer
    producer: ProducerT
    max_records: int
    within_s: float
    on_gap: Callable[[], None]

    async def run(self, queue: asyncio.Queue[faust.EventT[Any]]) -> None:
        order = DeliveryOrder(self.consumer.ledger.floor)
        while True:
            events = await _next_batch(queue, self.max_records, self.within_s)
            for event in events:
                self._check(order, event.message)
            deliveries = Deliveries(self.producer)
            await self.handle(events, deliveries)
            await deliveries.settle()
            self.consumer.processed(event.message for event in events)
            for _ in events:
                queue.task_done()

    def _check(self, order: DeliveryOrder, msg: Message) -> None:
        if missing := order.gap(msg.tp, msg.offset):
            self.on_gap()
            log.warning(
                "records %d..%d of %s never reached the scorer (next: %d, committed: %s)",
                *missing,
                msg.tp,
                msg.offset,
                self.consumer.ledger.floor(msg.tp),
            )

    async def consume(self, stream: faust.StreamT[Any]) -> None:
        """Run the handler on each batch of the stream's events in order; report a
        batch's records processed once what they produced is delivered."""
        queue: asyncio.Queue[faust.EventT[Any]] = asyncio.Queue(maxsize=self.max_records)
        async with asyncio.TaskGroup() as group:
            batches = group.create_task(self.run(queue))
            async for event in stream.events():
                await queue.put(event)
            await queue.join()
            batches.cancel()
