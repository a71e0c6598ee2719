"""Progress while Kafka is away: held in a bounded buffer (the oldest dropped, counted),
one warning however long the outage, and never an error for the job. Nothing listens on
the port: the real client finds no broker."""

import asyncio
import contextlib
import logging

import pytest

from fairlane.kafka_io import ProgressPublisher
from fairlane_events.records import JobProgress, RankProgress
from fairlane_runtime.kafka_security import PLAINTEXT
from tests.processes import free_port


def record(ts_ms: int) -> JobProgress:
    return JobProgress(
        schema_="job-progress/1",
        placement_id="p1",
        job_class="c",
        ts_ms=ts_ms,
        window_s=1.0,
        steps_per_s=1.0,
        ranks=[RankProgress(rank=0, uuid="G0", compute_s_per_step=0.5, steps=1)],
    )


async def test_kafka_away_holds_at_most_the_buffer_and_warns_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    publisher = ProgressPublisher(f"127.0.0.1:{free_port()}", PLAINTEXT, buffer=2, retry_s=0.05)
    for ts_ms in (1_000, 2_000, 3_000):
        publisher.offer(record(ts_ms))
    assert (publisher.backlog, publisher.dropped) == (2, 1)
    with caplog.at_level(logging.WARNING, "fairlane.launcher"):
        running = asyncio.create_task(publisher.run())
        await asyncio.sleep(1.0)  # several attempts
        running.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await running
    await publisher.close()
    assert (publisher.backlog, publisher.dropped, publisher.sent) == (2, 1, 0)
    warnings = [r.getMessage() for r in caplog.records if r.name == "fairlane.launcher"]
    assert len(warnings) == 1
    assert warnings[0].startswith("Kafka is not reachable at 127.0.0.1:")
