"""The scorer's own batching over a Faust stream, instead of ``Stream.noack_take``.

The agent's coroutine only moves events from the stream into a bounded queue; a second
task takes what the queue holds (up to ``max_records``, waiting at most ``within_s`` to
fill a batch), runs the handler and hands what the batch produced to the producer
(:class:`~fairlane_scorer.delivery.Deliveries`). Once the broker has acknowledged all of
it, and not before, the batch's records are reported processed to the consumer, whose
commit never passes an offset that is not (:mod:`fairlane_scorer.consumer`). Two batches
are in flight: the next one is scored while the broker acknowledges the last one, and
batches are reported in order; a failed delivery stops the agent with nothing of its
batch reported. (One batch at a time, a steady flow of small batches waited a broker
round trip per batch and fell behind at well under the backlog rate.)

Each partition's records are processed strictly in offset order from its committed
position (:class:`~fairlane_scorer.core.offsets.InOrder`): a record read again after a
rewind is passed over, and a record that arrives after a hole (Faust's fetch path can
lose one across a rebalance or an agent restart: docs/scoring.md, "Rebalances and
commits") is not processed; the partition is sought back to the hole instead, logged
with the offsets and counted (``fairlane_scorer_delivery_gaps_total``).

No record is processed while a rebalance is under way, nor one read in an earlier
generation or of a partition given up (:meth:`ScorerConsumer.owned`): such records are
released unprocessed, and once the rebalance is over the partitions they came from are
sought back to where their processing resumes.
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
    queue: asyncio.Queue[faust.EventT[Any]],
    max_records: int,
    within_s: float,
    timeout_s: float | None,
) -> list[faust.EventT[Any]]:
    """Up to ``max_records`` events, waiting at most ``within_s`` to fill the batch once
    one is there; empty when none came within ``timeout_s`` (None: wait for one)."""
    try:
        batch = [await asyncio.wait_for(queue.get(), timeout_s)]
    except TimeoutError:
        return []
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
        """Take the queue's events a batch at a time, for good; a failed delivery ends it
        (and the agent) at once."""
        async with asyncio.TaskGroup() as reports:
            await self._run(queue, reports)

    async def _run(
        self, queue: asyncio.Queue[faust.EventT[Any]], reports: asyncio.TaskGroup
    ) -> None:
        order: InOrder[TP] = InOrder()
        holes: dict[TP, tuple[int, float]] = {}  # where each partition was sought back to
        passed_over: set[TP] = set()  # partitions with records read during a rebalance
        previous: asyncio.Task[None] | None = None  # the last batch, until it is reported
        while True:
            timeout = RESEEK_S if holes or passed_over else None
            events = await _next_batch(queue, self.max_records, self.within_s, timeout)
            owned = self.consumer.owned()
            if owned is not None:
                await self._read_again(order, passed_over, holes)
            taken = []
            for event in events:
                msg = event.message
                tp, offset = msg.tp, msg.offset
                if owned is None or msg.generation_id != owned[0] or tp not in owned[1]:
                    self.consumer.released([msg])  # read again after the rebalance
                    passed_over.add(tp)
                    continue
                verdict = order.classify(
                    tp, offset, self.consumer.ledger.floor(tp), self.consumer.seeks
                )
                if verdict == InOrder.PROCESS:
                    taken.append(event)
                    holes.pop(tp, None)
                    continue
                self.consumer.released([msg])
                expected = order.expected(tp)
                if verdict == InOrder.HOLE and expected is not None:
                    await self._hole(tp, expected, offset, holes)
            acked = await self._handle(taken) if taken else None
            if previous is not None:
                await previous  # the batch before is reported first
                previous = None
            if acked is None:
                for _ in events:
                    queue.task_done()
            else:
                previous = reports.create_task(self._report(acked, taken, len(events), queue))
            if self.consumer.owned() is not None:
                await self._seek_again(holes)

    async def _handle(self, taken: list[faust.EventT[Any]]) -> Awaitable[Any]:
        """Run the handler on a batch and hand what it produced to the producer; what
        this returns completes when the broker has acknowledged all of it."""
        deliveries = Deliveries(self.producer)
        await self.handle(taken, deliveries)
        return await deliveries.flush()

    async def _report(
        self,
        acked: Awaitable[Any],
        taken: list[faust.EventT[Any]],
        count: int,
        queue: asyncio.Queue[faust.EventT[Any]],
    ) -> None:
        """Once the broker has a batch's output, report its records processed (the
        commit may pass them now) and its ``count`` events done."""
        await acked
        self.consumer.processed(event.message for event in taken)
        for _ in range(count):
            queue.task_done()

    async def _read_again(
        self, order: InOrder[TP], passed_over: set[TP], holes: dict[TP, tuple[int, float]]
    ) -> None:
        """The rebalance is over: seek each partition of this worker whose records were
        passed over during it back to where its processing resumes (Faust's seek to the
        commits may have come before those records did); before the next batch is
        looked at, so that its later records count as that seek's hole."""
        assigned = self.consumer.assignment()
        for tp in passed_over:
            at = order.resumes_at(tp, self.consumer.ledger.floor(tp), self.consumer.seeks)
            if tp in assigned and at is not None:
                log.info("%s: records read during a rebalance: reading again from %d", tp, at)
                holes[tp] = (at, time.monotonic())
                await self._seek(tp, at)
        passed_over.clear()

    async def _hole(
        self, tp: TP, expected: int, offset: int, holes: dict[TP, tuple[int, float]]
    ) -> None:
        """Records ``expected``.. of ``tp`` never arrived before ``offset``: read them
        again from there."""
        if holes.get(tp, (None,))[0] == expected:
            return  # sought already; the records after the hole are still arriving
        self.on_gap()
        log.warning(
            "records %d..%d of %s never reached the scorer: reading again from %d",
            expected,
            offset - 1,
            tp,
            expected,
        )
        holes[tp] = (expected, time.monotonic())
        await self._seek(tp, expected)

    async def _seek_again(self, holes: dict[TP, tuple[int, float]]) -> None:
        """Seek again where a hole is still open after ``RESEEK_S``: a fetch already under
        way when the partition was sought moves Faust's read offset past the hole, and
        its fetch loop then drops the re-read record (``DROPPED MESSAGE ROFF``)."""
        now = time.monotonic()
        for tp, (expected, at) in list(holes.items()):
            if tp not in self.consumer.assignment():
                del holes[tp]  # given up: the next owner starts at the committed position
            elif now - at >= RESEEK_S:
                log.info("%s: seeking again to %d", tp, expected)
                holes[tp] = (expected, now)
                await self._seek(tp, expected)

    async def _seek(self, tp: TP, offset: int) -> None:
        if tp in self.consumer.assignment():
            await self.consumer.seek(tp, offset)

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
