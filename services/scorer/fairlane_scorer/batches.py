"""The scorer's own batching of an agent's records, instead of ``Stream.noack_take``.

The consumer hands each agent's records to its :class:`~fairlane_scorer.intake.Intake`
a fetch at a time (the agent's stream only subscribes its topics, and carries what the
consumer did not hand over); a task takes what the intake holds (up to
``max_records``, waiting at most ``within_s`` to fill a batch), runs the handler and
hands what the batch produced to the producer
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
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass
from typing import Any

import faust
from faust.types import TP, Message, ProducerT

from fairlane_scorer.consumer import ScorerConsumer
from fairlane_scorer.core.offsets import InOrder
from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.intake import Intake

__all__ = ["RESEEK_S", "BatchHandler", "Batches", "one_by_one"]

log = logging.getLogger("fairlane.scorer")

RESEEK_S = 1.0

BatchHandler = Callable[[list[Message], Deliveries], Awaitable[None]]


def one_by_one(handle: Callable[[Message, Deliveries], Awaitable[None]]) -> BatchHandler:
    """A batch handler that runs ``handle`` on each record in order."""

    async def handle_all(messages: list[Message], out: Deliveries) -> None:
        for message in messages:
            await handle(message, out)

    return handle_all


@dataclass
class Batches:
    """How the batches of one agent are run, and what is told of them."""

    handle: BatchHandler
    consumer: ScorerConsumer
    producer: ProducerT
    max_records: int
    within_s: float
    on_gap: Callable[[], None]

    async def run(self, intake: Intake) -> None:
        """Take the intake's records a batch at a time, for good; a failed delivery ends
        it (and the agent) at once."""
        async with asyncio.TaskGroup() as reports:
            await self._run(intake, reports)

    async def _run(self, intake: Intake, reports: asyncio.TaskGroup) -> None:
        order: InOrder[TP] = InOrder()
        holes: dict[TP, tuple[int, float]] = {}  # where each partition was sought back to
        passed_over: set[TP] = set()  # partitions with records read during a rebalance
        previous: asyncio.Task[None] | None = None  # the last batch, until it is reported
        while True:
            timeout = RESEEK_S if holes or passed_over else None
            messages = await intake.take(self.max_records, self.within_s, timeout)
            owned = self.consumer.owned()
            if owned is not None:
                await self._read_again(order, passed_over, holes)
            taken = []
            for msg in messages:
                tp, offset = msg.tp, msg.offset
                if owned is None or msg.generation_id != owned[0] or tp not in owned[1]:
                    self.consumer.released([msg])  # read again after the rebalance
                    passed_over.add(tp)
                    continue
                verdict = order.classify(
                    tp, offset, self.consumer.ledger.floor(tp), self.consumer.seeks
                )
                if verdict == InOrder.PROCESS:
                    taken.append(msg)
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
                intake.done(len(messages))
            else:
                previous = reports.create_task(self._report(acked, taken, len(messages), intake))
            if self.consumer.owned() is not None:
                await self._seek_again(holes)

    async def _handle(self, taken: list[Message]) -> Awaitable[Any]:
        """Run the handler on a batch and hand what it produced to the producer; what
        this returns completes when the broker has acknowledged all of it."""
        deliveries = Deliveries(self.producer)
        await self.handle(taken, deliveries)
        return await deliveries.flush()

    async def _report(
        self,
        acked: Awaitable[Any],
        taken: list[Message],
        count: int,
        intake: Intake,
    ) -> None:
        """Once the broker has a batch's output, report its records processed (the
        commit may pass them now) and its ``count`` records done."""
        await acked
        self.consumer.processed(taken)
        intake.done(count)

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

    async def consume(self, stream: faust.StreamT[Any], topics: Iterable[str]) -> None:
        """Run the handler on each batch of the records of ``topics`` (the stream's) in
        order; report a batch's records processed once what they produced is delivered.
        The consumer hands the records over to this agent's intake; the stream carries
        only those it did not (none while the intake is there: iterating it subscribes
        the topics)."""
        intake = Intake(self.max_records)
        self.consumer.hand_over(topics, intake)
        try:
            async with asyncio.TaskGroup() as group:
                batches = group.create_task(self.run(intake))
                async for event in stream.events():
                    await intake.wait_room()
                    intake.put([event.message])
                await intake.join()
                batches.cancel()
        finally:
            self.consumer.hand_over(topics, None)
