"""Reading ``fairlane.node-samples.v1`` back in integration tests."""

from __future__ import annotations

import asyncio
from collections.abc import Collection

from aiokafka import AIOKafkaConsumer, TopicPartition

from fairlane_events.codec import decode
from fairlane_events.records import NodeSample
from fairlane_events.topics import NODE_SAMPLES, STREAM_PARTITIONS


async def node_samples_of(
    bootstrap: str, nodes: Collection[str], count: int, timeout_s: float = 30
) -> list[NodeSample]:
    """The first ``count`` records of ``nodes`` on the topic, from its beginning."""
    keys = {n.encode() for n in nodes}
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        partitions = [TopicPartition(NODE_SAMPLES, p) for p in range(STREAM_PARTITIONS)]
        consumer.assign(partitions)
        await consumer.seek_to_beginning(*partitions)
        found: list[NodeSample] = []
        async with asyncio.timeout(timeout_s):
            while len(found) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    found += [decode(NodeSample, r.value) for r in records if r.key in keys]
        return found[:count]
    finally:
        await consumer.stop()
