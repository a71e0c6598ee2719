"""The scorer's consumer commits an offset only when every offset before it on its
partition was processed (fairlane_scorer.consumer), where Faust's own consumer commits
past records nobody processed: a record a stream skipped during a rebalance, the
record at the committed position, the "gap" a rewind opens."""

import asyncio
from pathlib import Path

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message

from fairlane_events.topics import NODE_SAMPLES
from fairlane_scorer.app import create_app
from fairlane_scorer.consumer import ScorerConsumer
from fairlane_scorer.intake import Intake
from fairlane_scorer.settings import ScorerSettings
from tests.node_keys import TEST_KEY_RING

TP6 = TP(NODE_SAMPLES, 6)


def message(offset: int) -> Message:
    return Message(NODE_SAMPLES, 6, offset, 0.0, 0, None, b"n", b"{}", None, tp=TP6)


def scorer_consumer(tmp_path: Path) -> ScorerConsumer:
    app = create_app(
        ScorerSettings(app_id="scorer-t", data_dir=tmp_path, sample_key_ring_file=TEST_KEY_RING)
    )
    assert isinstance(app.consumer, ScorerConsumer)
    app.consumer.ledger.reset(TP6, 219)  # as seek_to_committed does after an assignment
    return app.consumer


def fausts_consumer(tmp_path: Path) -> faust_aiokafka.Consumer:
    app = faust.App("plain-t", broker="kafka://127.0.0.1:1", datadir=str(tmp_path))
    app.topics.acking_topics.add(NODE_SAMPLES)  # as an agent subscribed to it
    assert isinstance(app.consumer, faust_aiokafka.Consumer)
    app.consumer._committed_offset[TP6] = 219
    return app.consumer


def commits(consumer: faust_aiokafka.Consumer, times: int = 4) -> list[int]:
    """The offsets the consumer would commit, commit after commit."""
    made = []
    for _ in range(times):
        if TP6 in set(consumer._filter_tps_with_pending_acks()):
            offset = consumer._new_offset(TP6)
            if offset is not None:
                made.append(offset)
                consumer._committed_offset[TP6] = offset
    return made


async def test_a_rewinds_gap_is_not_committed(tmp_path: Path) -> None:
    """Records 219-243 queued, ``perform_seek`` put the read offset back to the
    committed 219, the next record read was 244 (the fetch loop reports a gap), and only
    219-221 were processed: the scorer commits 222; Faust's walks on to 245."""
    ours = scorer_consumer(tmp_path / "a")
    await ours._add_gap(TP6, 220, 244)
    ours.processed(message(o) for o in (219, 220, 221))
    assert commits(ours) == [222]

    theirs = fausts_consumer(tmp_path / "b")
    await theirs._add_gap(TP6, 220, 244)
    for offset in (219, 220, 221):
        theirs._acked[TP6].append(offset)
        theirs._acked_index[TP6].add(offset)
    assert commits(theirs) == [221, 222, 245]


def test_the_record_at_the_committed_position_holds_the_commit(tmp_path: Path) -> None:
    """219 (the next record to read) is not processed yet, 220-225 are: nothing may be
    committed. Faust's consumer commits 226 (``_new_offset`` refuses only when
    ``min(acked) - committed > 1``)."""
    ours = scorer_consumer(tmp_path / "a")
    ours.processed(message(o) for o in range(220, 226))
    assert commits(ours) == []
    ours.processed([message(219)])
    assert commits(ours) == [226]

    theirs = fausts_consumer(tmp_path / "b")
    for offset in range(220, 226):
        theirs.ack(message(offset))
    assert commits(theirs) == [226]


def test_a_record_a_stream_skipped_is_not_acked(tmp_path: Path) -> None:
    """A stream skips a record read while flow control is suspended (a rebalance) and
    acks it (``Stream._py_aiter``): Faust's consumer then commits past it, the scorer's
    does not count that ack."""
    ours = scorer_consumer(tmp_path / "a")
    ours.processed([message(219)])
    assert not ours.ack(message(220))  # skipped by the stream: never processed
    ours.processed(message(o) for o in (221, 222))
    assert commits(ours) == [220]

    theirs = fausts_consumer(tmp_path / "b")
    for offset in (219, 220, 221, 222):
        theirs.ack(message(offset))
    assert commits(theirs) == [223]


def test_faust_acks_leave_records_pending_until_processed(tmp_path: Path) -> None:
    """A rebalance waits (``Consumer.wait_empty``) while records are in ``unacked``:
    Faust's acks must not take them out before their output is delivered."""
    ours = scorer_consumer(tmp_path)
    pending = message(219)
    ours.track_message(pending)
    ours.ack(pending)
    assert pending in ours.unacked
    ours.processed([pending])
    assert pending not in ours.unacked


class Fetched:
    """An aiokafka ConsumerRecord's fields, as the fetcher returns them."""

    def __init__(self, topic: str, partition: int, offset: int) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.timestamp, self.timestamp_type = 1_000, 0
        self.headers: list[tuple[str, bytes]] = []
        self.key, self.value, self.checksum = b"n", b"{}", None
        self.serialized_key_size = self.serialized_value_size = 2


def fetch(tp: TP, offsets: range) -> dict[TP, list[Fetched]]:
    return {tp: [Fetched(tp.topic, tp.partition, o) for o in offsets]}


async def test_a_fetch_goes_to_the_intake_whole_and_tracked(tmp_path: Path) -> None:
    """The records of a handed-over topic reach its intake in one piece, in order, each
    pending until processed (a rebalance waits for them); a fetch from before a seek (its
    offsets behind the read offset) is dropped as Faust's loop drops it."""
    ours = scorer_consumer(tmp_path)
    intake = Intake(capacity=100)
    ours.hand_over([NODE_SAMPLES], intake)
    await ours._hand_out(fetch(TP6, range(219, 224)), None)
    taken = await intake.take(100, 0.0, 0)
    assert [m.offset for m in taken] == [219, 220, 221, 222, 223]
    assert set(ours._unacked_messages) == set(taken)
    await ours._hand_out(fetch(TP6, range(220, 226)), None)
    assert [m.offset for m in await intake.take(100, 0.0, 0)] == [223, 224, 225]
    ours.processed(taken)
    assert commits(ours) == [224]


async def test_records_of_other_topics_take_fausts_path(tmp_path: Path) -> None:
    """A topic without an intake (the changelogs during recovery) is delivered one
    record at a time through Faust's conductor, as before; once handed back, so is the
    intake's topic."""
    ours = scorer_consumer(tmp_path)
    delivered: list[tuple[str, int]] = []

    async def conductor(message: Message) -> None:
        delivered.append((message.topic, message.offset))

    ours.callback = conductor
    intake = Intake(capacity=100)
    ours.hand_over([NODE_SAMPLES], intake)
    changelog = TP("scorer-t-node-windows-changelog", 6)
    await ours._hand_out({**fetch(changelog, range(3)), **fetch(TP6, range(219, 221))}, None)
    assert delivered == [(changelog.topic, 0), (changelog.topic, 1), (changelog.topic, 2)]
    assert len(intake) == 2
    ours.hand_over([NODE_SAMPLES], None)
    await ours._hand_out(fetch(TP6, range(221, 222)), None)
    assert delivered[-1] == (NODE_SAMPLES, 221)
    assert len(intake) == 2


async def test_a_full_intake_holds_the_next_fetch_until_there_is_room(tmp_path: Path) -> None:
    ours = scorer_consumer(tmp_path)
    intake = Intake(capacity=3)
    ours.hand_over([NODE_SAMPLES], intake)
    await ours._hand_out(fetch(TP6, range(219, 223)), None)  # past the capacity: all of it
    assert len(intake) == 4
    waiting = asyncio.create_task(ours._hand_out(fetch(TP6, range(223, 225)), None))
    await asyncio.sleep(0.01)
    assert not waiting.done()
    assert len(intake) == 4
    assert [m.offset for m in await intake.take(2, 0.0, 0)] == [219, 220]
    await asyncio.wait_for(waiting, 5)
    assert [m.offset for m in await intake.take(10, 0.0, 0)] == [221, 222, 223, 224]


async def test_a_fetch_that_returns_after_the_flow_stopped_is_not_handed_over(
    tmp_path: Path,
) -> None:
    """A rebalance stopped the flow while the fetch was under way: its records are not
    handed to the intake (the seek to the commits reads them again), and a seek that
    fails meanwhile does not end the fetch loop."""
    ours = scorer_consumer(tmp_path)
    intake = Intake(capacity=100)
    ours.hand_over([NODE_SAMPLES], intake)
    sought: list[bool] = []

    async def perform_seek() -> None:
        sought.append(True)
        raise RuntimeError("partition is not assigned")

    ours.perform_seek = perform_seek  # type: ignore[method-assign]
    ours.flow_active = False
    await ours._hand_out(fetch(TP6, range(219, 224)), None)
    assert sought == [True]
    assert len(intake) == 0
    assert not ours._unacked_messages


async def test_the_worker_talks_to_the_broker_in_its_own_sizes(tmp_path: Path) -> None:
    """Its fetches wait at most ``fetch_max_wait_ms`` (Faust fixes 1,500 ms) for
    ``fetch_min_bytes`` (aiokafka: 1) and its producer batches ``producer_batch_bytes``
    per partition (Faust: 16 KiB)."""
    settings = ScorerSettings(
        app_id="scorer-t",
        data_dir=tmp_path,
        sample_key_ring_file=TEST_KEY_RING,
        fetch_max_wait_ms=70,
        fetch_min_bytes=9_000,
        producer_batch_bytes=300_000,
    )
    app = create_app(settings)
    thread = app.consumer._thread  # type: ignore[attr-defined]
    kafka = thread._create_worker_consumer(app.transport)  # not started: no broker needed
    try:
        assert kafka._fetch_max_wait_ms == 70
        assert kafka._fetch_min_bytes == 9_000
    finally:
        await kafka.stop()
    assert app.producer.max_batch_size == 300_000
