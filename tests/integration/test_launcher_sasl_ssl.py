"""``fairlane run`` as the ``fairlane-launcher`` principal over SASL_SSL (scripts/kafka.sh
KAFKA_SASL_SSL=1): with only its ACLs — write job progress, read placements, no consumer
group — it publishes the job's progress and acts on a degraded event, and says nothing
about Kafka being away. The scheduler uses the broker's operator listener."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairlane_events.records import PlacementEvent, SlowGpu
from fairlane_runtime.kafka import ensure_topics
from tests.launcher_harness import (
    launcher,
    publish_event,
    published_progress,
    scheduler_process,
)
from tests.scheduler_harness import node_scores, publish
from tests.secure_kafka import SecureKafka, secure_kafka

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def kafka(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SecureKafka]:
    with secure_kafka(tmp_path_factory.mktemp("kafka-sasl")) as broker:
        asyncio.run(ensure_topics(broker.operator))
        yield broker


def test_the_launcher_principal_reports_and_hears_degraded_events(
    kafka: SecureKafka, database_url: str, tmp_path: Path
) -> None:
    node = "sasl-launch"
    scores = node_scores(
        node, [("NVIDIA B200", 0.95, 180.0)], speed=6.0, ts_ms=int(time.time() * 1000)
    )
    asyncio.run(publish(kafka.operator, scores))
    with scheduler_process(kafka.operator, database_url, tmp_path / "s.log") as scheduler:
        env = {**kafka.env("fairlane-launcher"), "FAIRLANE_SCHEDULER_URL": scheduler.url}
        job = [sys.executable, "-m", "fairlane.demo", "--steps", "0", "--exit-on-degraded"]
        args = ["--gpus", "1", "--lease-s", "5", "--window-s", "0.5", "--", *job]
        with launcher(args, env, tmp_path / "l.log") as run:
            placement_id = run.placement_id()
            run.wait_for("fairlane.demo: running")
            time.sleep(1.5)  # a few windows of progress
            placement = scheduler.placement(placement_id)
            uuid = placement["nodes"][0]["gpus"][0]["uuid"]
            event = PlacementEvent(
                schema_="placement/1",
                placement_id=placement_id,
                job_id=placement["job_id"],
                namespace=placement["namespace"],
                event="degraded",
                ts_ms=int(time.time() * 1000),
                nodes=[],
                slow_gpus=[SlowGpu(uuid=uuid, node=node, speed=0.4, source="score")],
            )
            asyncio.run(publish_event(kafka.operator, event))
            assert run.exit_code() == 0, run.text()
        assert scheduler.placement(placement_id)["state"] == "released"
    text = run.text()
    assert f"fairlane.demo: degraded: {uuid}=0.40" in text
    assert "warning: Kafka" not in text
    assert "cannot read degraded events" not in text
    records = asyncio.run(published_progress(kafka.operator, placement_id))
    assert records
    assert {r.uuid for rec in records for r in rec.ranks} == {uuid}
