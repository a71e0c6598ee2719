"""The chaos suite's placement audit against a real outbox and the real placements topic:
an event counts as lost only once the relay has marked it published, and the audit says
which outbox row it was. Before, a row committed between the audit's outbox query and
its read of the topic, not yet sent by the relay, counted as an event lost."""

from __future__ import annotations

import uuid

import asyncpg
import pytest
from aiokafka import AIOKafkaProducer

from fairlane_events.codec import encode
from fairlane_events.records import PlacementEvent
from fairlane_events.topics import PLACEMENTS
from fairlane_scheduler.adapters.migrations import apply_migrations, load_migrations
from tests.chaos.audit import audit_placements
from tests.chaos.load import Ledger

pytestmark = pytest.mark.integration


def _event(placement_id: str, event: str) -> PlacementEvent:
    return PlacementEvent.model_validate(
        {
            "schema": "placement/1",
            "placement_id": placement_id,
            "job_id": f"job-{placement_id[:8]}",
            "namespace": "default",
            "event": event,
            "ts_ms": 1_800_000_000_000,
            "nodes": [],
        }
    )


async def test_only_published_events_can_be_lost_and_each_loss_is_named(
    kafka_bootstrap: str, database_url: str
) -> None:
    sent, unsent = str(uuid.uuid4()), str(uuid.uuid4())
    rows = [  # (event, published, on the topic)
        (_event(sent, "created"), True, True),
        (_event(sent, "released"), False, False),  # committed; the relay has yet to send it
        (_event(unsent, "created"), True, False),  # marked published, absent: a real loss
    ]
    conn = await asyncpg.connect(database_url)
    try:
        await apply_migrations(conn, load_migrations())
        for event, published, _ in rows:
            await conn.execute(
                "INSERT INTO outbox (placement_id, payload, published_at) "
                "VALUES ($1, $2::jsonb, CASE WHEN $3 THEN now() END)",
                uuid.UUID(event.placement_id),
                encode(event).decode(),
                published,
            )
        lost_id = await conn.fetchval("SELECT max(id) FROM outbox")
    finally:
        await conn.close()
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
    await producer.start()
    try:
        for event, _, on_topic in rows:
            if on_topic:
                await producer.send_and_wait(
                    PLACEMENTS, encode(event), key=event.placement_id.encode()
                )
    finally:
        await producer.stop()

    audit = await audit_placements(kafka_bootstrap, database_url, Ledger())

    assert (audit.outbox_unpublished, audit.events_lost, audit.events_duplicated) == (1, 1, 0)
    [loss] = audit.lost_events
    assert f"outbox row {lost_id} (placement {unsent}, published " in loss
    assert loss.endswith("under its key on the topic: nothing")
