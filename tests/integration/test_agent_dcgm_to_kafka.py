"""The dcgm backend end to end: the real agent (bridge, delivery, publisher) scraping two
dcgm-exporters over HTTP, one of which goes down, into a real Kafka, read back."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairlane_agent.__main__ import run
from fairlane_agent.settings import AgentSettings
from fairlane_events.codec import decode
from fairlane_events.records import NodeSample
from fairlane_events.topics import NODE_SAMPLES, STREAM_PARTITIONS
from tests.fakes.dcgm_exporter import ExporterGpu, fixture_gpus, h100_values, render, serve
from tests.fakes.nvml import FakeNvml

pytestmark = pytest.mark.integration


async def records_of(bootstrap: str, nodes: set[str], count: int) -> list[NodeSample]:
    """The first ``count`` records of ``nodes`` on the topic, from its beginning."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        partitions = [TopicPartition(NODE_SAMPLES, p) for p in range(STREAM_PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        found: list[NodeSample] = []
        async with asyncio.timeout(30):
            while len(found) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    found += [
                        decode(NodeSample, r.value)
                        for r in records
                        if r.key is not None and r.key.decode() in nodes
                    ]
        return found[:count]
    finally:
        await consumer.stop()


async def test_dcgm_backend_publishes_every_exporters_nodes_through_an_outage(
    kafka_bootstrap: str, unique: str
) -> None:
    one, two = f"dcgm-a-{unique}", f"dcgm-b-{unique}"
    other = [ExporterGpu(0, f"GPU-{unique}-b0", values=h100_values())]
    with serve(render(fixture_gpus(), hostname=one)) as a, serve(render(other, hostname=two)) as b:
        settings = AgentSettings(
            backend="dcgm",
            dcgm_url=[a.url, b.url],
            dcgm_timeout_s=0.5,
            interval_s=0.5,
            metrics_port=0,
            kafka_bootstrap_servers=kafka_bootstrap,
        )
        nvml = FakeNvml([])
        stop = asyncio.Event()
        agent = asyncio.create_task(run(settings, lambda: nvml, stop))
        first = await records_of(kafka_bootstrap, {one, two}, 2)
        b.stop()
        scrapes = a.scrapes
        while a.scrapes < scrapes + 3:  # three rounds with exporter b down
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(agent, 20)
    assert {r.node for r in first} == {one, two}
    assert {r.source for r in first} == {"dcgm"}
    assert not nvml.calls
    everything = await records_of(kafka_bootstrap, {one, two}, a.scrapes + 1)
    assert sum(r.node == one for r in everything) >= scrapes + 3  # node a kept publishing
    record_a = next(r for r in first if r.node == one)
    assert record_a.driver_version == "570.124.06"
    assert [g.gpu_util_pct for g in record_a.gpus] == [0, 97]
