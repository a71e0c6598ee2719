"""No record is processed while a rebalance is under way, nor one read in an earlier
generation (fairlane_scorer.batches): during a takeover's recovery such a record's batch
read a node's row before the recovery had written it, and wrote a one-sample row over
the node's whole window (docs/scoring.md, "Rebalances and commits")."""

import asyncio
from collections.abc import Iterable
from typing import Any, cast

import pytest
from faust.types import TP, Message

from fairlane_events.topics import NODE_SAMPLES
from fairlane_scorer.batches import Batches
from fairlane_scorer.consumer import ScorerConsumer
from fairlane_scorer.core.offsets import OffsetLedger
from fairlane_scorer.delivery import Deliveries
from fairlane_scorer.intake import Intake

TP3 = TP(NODE_SAMPLES, 3)


def record(offset: int, generation: int) -> Message:
    return Message(
        NODE_SAMPLES, 3, offset, 0.0, 0, None, b"n", b"{}", None, tp=TP3,
        generation_id=generation,
    )  # fmt: skip


class Consumer:
    """What the batches ask of the scorer's consumer, with its rebalance state set by
    the test (ScorerConsumer.owned reads Faust's)."""

    def __init__(self) -> None:
        self.ledger: OffsetLedger[TP] = OffsetLedger()
        self.ledger.reset(TP3, 10)  # the committed position, as seek_to_committed sets it
        self.seeks = 1
        self.generation, self.rebalancing = 1, False
        self.released_offsets: list[int] = []
        self.sought: list[int] = []

    def owned(self) -> tuple[int, frozenset[TP]] | None:
        return None if self.rebalancing else (self.generation, frozenset({TP3}))

    def assignment(self) -> set[TP]:
        return {TP3}

    def released(self, messages: Iterable[Message]) -> None:
        self.released_offsets += [m.offset for m in messages]

    def processed(self, messages: Iterable[Message]) -> None:
        for m in messages:
            self.ledger.done(m.tp, m.offset)

    async def seek(self, tp: TP, offset: int) -> None:
        self.sought.append(offset)


class Producer:
    async def send(self, *args: Any) -> asyncio.Future[None]:
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        done.set_result(None)
        return done


async def run_batches(
    consumer: Consumer, steps: list[tuple[list[Message], bool]]
) -> list[tuple[int, int | None]]:
    """Feed each step's events (with the rebalance flag set as given) and wait until the
    batches are through them; the (offset, generation) of each record handled, in order."""
    handled: list[tuple[int, int | None]] = []

    async def handle(messages: list[Message], out: Deliveries) -> None:
        handled.extend((m.offset, m.generation_id) for m in messages)

    batches = Batches(
        handle,
        consumer=cast(ScorerConsumer, consumer),
        producer=cast(Any, Producer()),
        max_records=10,
        within_s=0.0,
        on_gap=lambda: None,
    )
    intake = Intake(10)
    task = asyncio.create_task(batches.run(intake))
    try:
        for messages, rebalancing in steps:
            consumer.rebalancing = rebalancing
            intake.put(messages)
            await intake.join()
            await asyncio.sleep(0)  # the batches' loop ends its round (the seeks)
    finally:
        task.cancel()
    return handled


async def test_records_read_during_a_rebalance_are_read_again_after_it() -> None:
    consumer = Consumer()
    during = [record(o, generation=1) for o in (10, 11)]
    handled = await run_batches(consumer, [(during, True)])
    assert handled == []  # the tables may not be whole yet
    assert consumer.released_offsets == [10, 11]  # a rebalance need not wait for them
    assert consumer.ledger.advance(TP3) is None  # nothing committed past them

    consumer = Consumer()
    later = [record(12, generation=1)]  # the next record, once the rebalance is over
    again = [record(o, generation=1) for o in (10, 11, 12)]
    handled = await run_batches(consumer, [(during, True), (later, False), (again, False)])
    assert consumer.sought == [10]  # back to the commit, the passed-over records again
    assert handled == [(10, 1), (11, 1), (12, 1)]


async def test_a_record_of_an_earlier_generation_is_not_processed() -> None:
    """Read before a rebalance, handed to the batches after it: its partition was sought
    to the commit since, and the record comes again in the new generation."""
    consumer = Consumer()
    consumer.generation = 2
    stale, fresh = record(10, generation=1), record(10, generation=2)
    handled = await run_batches(consumer, [([stale], False), ([fresh], False)])
    assert handled == [(10, 2)]
    assert consumer.released_offsets == [10]
    assert consumer.ledger.advance(TP3) == 11


class HeldProducer:
    """A producer whose deliveries the test acknowledges (or fails) one by one."""

    def __init__(self) -> None:
        self.pending: dict[bytes, asyncio.Future[None]] = {}

    async def send(self, topic: str, key: bytes, *args: Any) -> asyncio.Future[None]:
        future = self.pending[key] = asyncio.get_running_loop().create_future()
        return future

    def ack(self, *keys: bytes) -> None:
        for key in keys:
            self.pending[key].set_result(None)


async def settle_loop() -> None:
    for _ in range(50):  # enough rounds of the event loop for the batches to move on
        await asyncio.sleep(0)


def pipelined(
    consumer: Consumer, producer: HeldProducer, handled: list[int]
) -> tuple[Batches, Intake]:
    async def handle(messages: list[Message], out: Deliveries) -> None:
        for m in messages:
            handled.append(m.offset)
            await out.send("out", str(m.offset).encode(), b"")

    batches = Batches(
        handle,
        consumer=cast(ScorerConsumer, consumer),
        producer=cast(Any, producer),
        max_records=2,
        within_s=0.0,
        on_gap=lambda: None,
    )
    return batches, Intake(2)


async def test_the_next_batch_is_scored_while_the_last_one_is_delivered() -> None:
    """Two batches in flight, reported processed in order, each only once the broker
    has what it produced: a commit never passes a record whose output may be lost."""
    consumer, producer, handled = Consumer(), HeldProducer(), list[int]()
    batches, intake = pipelined(consumer, producer, handled)
    task = asyncio.create_task(batches.run(intake))
    try:
        for offset in (10, 11):
            intake.put([record(offset, generation=1)])
        await settle_loop()
        for offset in (12, 13):
            intake.put([record(offset, generation=1)])
        await settle_loop()
        assert handled == [10, 11, 12, 13]  # the second batch did not wait for the first
        for offset in (14, 15):
            intake.put([record(offset, generation=1)])
        await settle_loop()
        assert handled == [10, 11, 12, 13]  # but a third waits: one batch delivering
        producer.ack(b"12", b"13")
        await settle_loop()
        assert consumer.ledger.advance(TP3) is None  # the first batch is not delivered
        producer.ack(b"10")
        await settle_loop()
        assert consumer.ledger.advance(TP3) is None  # nor all of it
        producer.ack(b"11")
        await settle_loop()
        assert consumer.ledger.advance(TP3) == 14  # both, in order
        assert handled == [10, 11, 12, 13, 14, 15]
        producer.ack(b"14", b"15")
        await asyncio.wait_for(intake.join(), 10)  # events are done once reported
        assert consumer.ledger.advance(TP3) == 16
    finally:
        task.cancel()


async def test_a_failed_delivery_stops_the_batches_and_nothing_is_reported() -> None:
    consumer, producer, handled = Consumer(), HeldProducer(), list[int]()
    batches, intake = pipelined(consumer, producer, handled)
    task = asyncio.create_task(batches.run(intake))
    for offset in (10, 11):
        intake.put([record(offset, generation=1)])
    await settle_loop()
    producer.ack(b"10")
    producer.pending[b"11"].set_exception(RuntimeError("broker said no"))
    with pytest.raises(ExceptionGroup) as failed:
        await asyncio.wait_for(task, 10)
    assert failed.group_contains(RuntimeError, match="broker said no")
    assert consumer.ledger.advance(TP3) is None
