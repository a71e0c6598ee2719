"""Learned speeds in placement, against real Kafka and Postgres (issue 27 item 4): speeds
published on ``fairlane.gpu-speeds.v1`` steer a job that names its class away from the
slow GPUs, and a running placement whose GPU turns slow gets exactly one ``degraded``
event on ``fairlane.placements.v1``, whatever the replicas and restarts."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import asyncpg
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairlane_events.codec import decode
from fairlane_events.records import PlacementEvent, SlowGpu
from fairlane_events.topics import GPU_SPEEDS, PLACEMENTS, STREAM_PARTITIONS
from fairlane_scheduler.settings import SchedulerSettings
from tests.factories import gpu_speed
from tests.integration.test_scheduler_api import publish_scores, wait_until
from tests.scheduler_harness import publish, running_scheduler, send_raw, wait_for_node

pytestmark = pytest.mark.integration


def settings_of(kafka_bootstrap: str, database_url: str) -> SchedulerSettings:
    return SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        expiry_interval_s=0.2,
        auth_disabled=True,
    )


async def publish_speed(
    bootstrap: str, node: str, index: int, job_class: str, speed: float
) -> None:
    """A learned speed of ``GPU-<node>-<index>`` (the scores' uuids), confidently there."""
    record = gpu_speed(
        uuid=f"GPU-{node}-{index}",
        node=node,
        model="NVIDIA B200",
        job_class=job_class,
        speed=speed,
        low=speed - 0.03,
        high=speed + 0.03,
        ts_ms=int(time.time() * 1000),
    )
    await publish(bootstrap, [record])


async def events_of(bootstrap: str, placement_id: str) -> list[PlacementEvent]:
    """Every event of one placement on the placements topic now, in order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    found: list[PlacementEvent] = []
    try:
        parts = [TopicPartition(PLACEMENTS, p) for p in range(STREAM_PARTITIONS)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        ends = await consumer.end_offsets(parts)
        while [p for p in parts if await consumer.position(p) < ends[p]]:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [
                    decode(PlacementEvent, r.value)
                    for r in records
                    if r.key == placement_id.encode() and r.value is not None
                ]
    finally:
        await consumer.stop()
    return found


def gpus_of(body: dict[str, Any]) -> list[str]:
    return [g["uuid"] for n in body["nodes"] for g in n["gpus"]]


async def test_a_job_with_a_class_avoids_the_gpus_learned_slow_under_it(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    node, job_class = f"ls-{unique}", f"bert-{unique}"
    await publish_scores(kafka_bootstrap, node, [0.95, 0.95, 0.95, 0.95])
    for index in (0, 1):
        await publish_speed(kafka_bootstrap, node, index, job_class, 0.5)
    async with running_scheduler(settings_of(kafka_bootstrap, database_url)) as (client, app):
        await wait_for_node(app, node, gpus=4)
        fleet = app.state.runtime.fleet

        async def learned() -> bool:
            return all(f"GPU-{node}-{i}" in fleet.speed_records for i in (0, 1))

        await wait_until(learned)
        body = {"job_id": "classed", "gpus_per_node": 2, "models": ["B200"]}
        classed = await client.post("/v1/placements", json={**body, "job_class": job_class})
        assert classed.status_code == 201, classed.text
        assert gpus_of(classed.json()) == [f"GPU-{node}-2", f"GPU-{node}-3"]
        await client.delete(f"/v1/placements/{classed.json()['id']}")
        # Without the class (or under another) the same GPUs are equals: index order.
        plain = await client.post("/v1/placements", json={**body, "job_id": "plain"})
        assert gpus_of(plain.json()) == [f"GPU-{node}-0", f"GPU-{node}-1"]
        # A record that is no learned speed is counted, not applied, and nothing stops.
        await send_raw(kafka_bootstrap, GPU_SPEEDS, b"not a speed", key=b"x/y")

        async def counted() -> bool:
            metrics = (await client.get("/metrics")).text
            rejected = f'outcome="rejected",topic="{GPU_SPEEDS}"'
            line = next(m for m in metrics.splitlines() if rejected in m and "_total" in m)
            return float(line.rsplit(" ", 1)[1]) >= 1

        await wait_until(counted)
        # A tombstone (the learner forgot a GPU under the class): nothing learned there.
        await send_raw(kafka_bootstrap, GPU_SPEEDS, None, key=f"GPU-{node}-0/{job_class}".encode())

        async def forgotten() -> bool:
            return job_class not in fleet.speed_records.get(f"GPU-{node}-0", {})

        await wait_until(forgotten)
        assert fleet.speed_records[f"GPU-{node}-1"][job_class].speed == 0.5


async def test_a_slow_gpu_of_a_running_placement_is_announced_once(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    node, job_class = f"dg-{unique}", f"bert-{unique}"
    await publish_scores(kafka_bootstrap, node, [0.95, 0.95])
    settings = settings_of(kafka_bootstrap, database_url)
    # Two replicas on one database: Postgres decides which announces.
    async with (
        running_scheduler(settings) as (client, app),
        running_scheduler(settings) as (_, other),
    ):
        for replica in (app, other):
            await wait_for_node(replica, node, gpus=2)
        job = {"job_id": "j", "gpus_per_node": 2, "models": ["B200"], "job_class": job_class}
        placed = await client.post("/v1/placements", json=job)
        assert placed.status_code == 201, placed.text
        placement_id = placed.json()["id"]
        await publish_speed(kafka_bootstrap, node, 1, job_class, 0.6)

        async def announced() -> bool:
            return len(await events_of(kafka_bootstrap, placement_id)) >= 2

        await wait_until(announced)
        await asyncio.sleep(1.0)  # five more housekeeping rounds on each replica
        created, degraded = await events_of(kafka_bootstrap, placement_id)
        assert (created.event, degraded.event) == ("created", "degraded")
        assert degraded.nodes == created.nodes
        assert degraded.slow_gpus == [
            SlowGpu(uuid=f"GPU-{node}-1", node=node, speed=0.6, source="learned")
        ]
        counted = [
            replica.state.runtime.metrics.degraded.labels("learned")._value.get()
            for replica in (app, other)
        ]
        assert sorted(counted) == [0, 1]
    # A restarted scheduler finds the announcement in Postgres and says nothing again.
    async with running_scheduler(settings) as (_, restarted):
        fleet = restarted.state.runtime.fleet
        slow = f"GPU-{node}-1"

        async def slow_and_held() -> bool:
            return slow in fleet.speed_records and bool(fleet.held[fleet.row.get(slow, 0)])

        await wait_until(slow_and_held)
        await asyncio.sleep(1.0)
        assert len(await events_of(kafka_bootstrap, placement_id)) == 2
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT gpu_uuid, source FROM degraded_gpus")
    finally:
        await conn.close()
    assert [(r["gpu_uuid"], r["source"]) for r in rows] == [(f"GPU-{node}-1", "learned")]
