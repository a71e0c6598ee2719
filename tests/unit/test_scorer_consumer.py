"""The scorer's consumer commits an offset only when every offset before it on its
partition was processed (fairlane_scorer.consumer), where Faust's own consumer commits
past records nobody processed: a record a stream skipped during a rebalance, the
record at the committed position, the "gap" a rewind opens."""

from pathlib import Path

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, Message

from fairlane_events.topics import NODE_SAMPLES
from fairlane_scorer.app import create_app
from fairlane_scorer.consumer import ScorerConsumer
from fairlane_scorer.settings import ScorerSettings

TP6 = TP(NODE_SAMPLES, 6)


def message(offset: int) -> Message:
    return Message(NODE_SAMPLES, 6, offset, 0.0, 0, None, b"n", b"{}", None, tp=TP6)


def scorer_consumer(tmp_path: Path) -> ScorerConsumer:
    app = create_app(ScorerSettings(app_id="scorer-t", data_dir=tmp_path))
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
