"""The scorer's consumer commits only offsets the agents acknowledged, even after the
rewind that every rebalance makes (fairlane_scorer.consumer)."""

from pathlib import Path

import faust
from faust.transport.drivers import aiokafka as faust_aiokafka
from faust.types import TP, ConsumerT

from fairlane_events.topics import NODE_SAMPLES
from fairlane_scorer.app import create_app
from fairlane_scorer.consumer import AckedOnlyConsumer
from fairlane_scorer.settings import ScorerSettings

TP6 = TP(NODE_SAMPLES, 6)


async def commits_after_a_rewind(consumer: ConsumerT) -> list[int]:
    """What the consumer commits, commit after commit, when records 219-243 were queued,
    ``perform_seek`` put the read offset back to the committed 219, the next record read
    was 244 (so the fetch loop reports a gap 220-244), and only 219-221 were acked."""
    assert isinstance(consumer, faust_aiokafka.Consumer)
    consumer._committed_offset[TP6] = 219
    await consumer._add_gap(TP6, 220, 244)  # as _drain_messages does on the jump
    for offset in (219, 220, 221):
        consumer._acked[TP6].append(offset)
        consumer._acked_index[TP6].add(offset)
    commits: list[int] = []
    for _ in range(4):
        commit = consumer._new_offset(TP6)
        if commit is not None:
            commits.append(commit)
            consumer._committed_offset[TP6] = commit
    return commits


async def test_the_scorer_commits_only_what_was_acked(tmp_path: Path) -> None:
    app = create_app(ScorerSettings(app_id="scorer-t", data_dir=tmp_path))
    assert isinstance(app.consumer, AckedOnlyConsumer)
    assert await commits_after_a_rewind(app.consumer) == [222]


async def test_fausts_own_consumer_commits_records_nobody_acked(tmp_path: Path) -> None:
    """Why the scorer has its own: Faust's walks through the 'gap' to 245, past 23
    records still queued. If this fails after a Faust upgrade, the override may go."""
    app = faust.App("plain-t", broker="kafka://127.0.0.1:1", datadir=str(tmp_path))
    assert await commits_after_a_rewind(app.consumer) == [221, 222, 245]
