"""The scorer's own batching over a Faust stream, instead of ``Stream.noack_take``.

The agent's coroutine only moves events from the stream into a bounded queue; a second
task takes what the queue holds (up to ``max_records``, waiting at most ``within_s`` to
fill a batch), runs the handler, waits until the broker has acknowledged everything the
batch produced (:class:`~fairlane_scorer.delivery.Deliveries`), and only then reports
the batch's records processed to the consumer, whose commit never passes an offset that
is not (:mod:`fairlane_scorer.consumer`).

Each partition's records are processed strictly in offset order from its committed
position (:class:`~fairlane_scorer.core.offsets.InOrder`): a record read again after a
rewind is passed over, and a record that arrives after a hole (Faust's fetch path can
lose one across a rebalance or an agent restart: docs/scoring.md, "Rebalances and
commits") is not processed; the partition is sought back to the hole instead, logged
with the offsets and counted (``fairlane_scorer_delivery_gaps_total``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TP, ProducerT

from fairlane_scorer.consumer import ScorerConsumer
from fairlane_scorer.core.offsets import InOrder
from fairlane_scorer.delivery import Deliveries

__all__ = ["RESEEK_S", "BatchHandler", "Batches", "one_by_one"]

log = logging.getLogger("fairlane.scorer")

RESEEK_S = 1.0

BatchHandler = Callable[[list[faust.EventT[Any]], Deliveries], Awaitable[None]]


def one_by_one(handle: Callable[[faust.EventT[Any], Deliveries], Awaitable[None]]) -> BatchHandler:
    """A batch handler that runs ``handle`` on each event in order."""

    async def handle_all(events: list[faust.EventT[Any]], out: Deliveries) -> None:
        for event in events:
            await handle(event, out)

    return handle_all


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
        order: InOrder[TP] = InOrder()
        sought: dict[TP, tuple[int, float]] = {}  # the seek asked for, and when
        while True:
            events = await _next_batch(queue, self.max_records, self.within_s)
            taken = []
            for event in events:
                msg = event.message
                tp, offset = msg.tp, msg.offset
                verdict = order.classify(
                    tp, offset, self.consumer.ledger.floor(tp), self.consumer.seeks
                )
                if verdict == InOrder.PROCESS:
                    taken.append(event)
                    sought.pop(tp, None)
                    continue
                self.consumer.released([msg])
                if verdict == InOrder.HOLE:
                    await self._seek_back(tp, offset, order.expected(tp), sought)
            if taken:
                deliveries = Deliveries(self.producer)
                await self.handle(taken, deliveries)
                await deliveries.settle()
                self.consumer.processed(event.message for event in taken)
            for _ in events:
                queue.task_done()

    async def _seek_back(
        self, tp: TP, offset: int, expected: int | None, sought: dict[TP, tuple[int, float]]
    ) -> None:
        """Records ``expected``.. of ``tp`` never arrived before ``offset``: read them
        again from there (asked again after ``RESEEK_S``: Faust drops a re-read record
        below a read offset that a stale fetch moved on)."""
        if expected is None or tp not in self.consumer.assignment():
            return  # given up: the next owner starts at the committed position
        now = time.monotonic()
        last = sought.get(tp)
        if last is not None and last[0] == expected and now - last[1] < RESEEK_S:
            return
        if last is None or last[0] != expected:
            self.on_gap()
            log.warning(
                "records %d..%d of %s never reached the scorer: reading again from %d",
                expected,
                offset - 1,
                tp,
                expected,
            )
        sought[tp] = (expected, now)
        await self.consumer.seek(tp, expected)

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
