"""Reading ``fairlane.node-samples.v1`` back in integration tests."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Collection
from contextlib import asynccontextmanager
from typing import Literal

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from fairlane_events.codec import decode
from fairlane_events.records import NodeSample
from fairlane_events.topics import NODE_SAMPLES, STREAM_PARTITIONS

PARTITIONS = [TopicPartition(NODE_SAMPLES, p) for p in range(STREAM_PARTITIONS)]


@asynccontextmanager
async def samples_consumer(
    bootstrap: str, start: Literal["beginning", "end"] = "beginning"
) -> AsyncIterator[AIOKafkaConsumer]:
    """A consumer of every partition of the topic (no group), at its beginning or end."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        consumer.assign(PARTITIONS)
        if start == "beginning":
            await consumer.seek_to_beginning(*PARTITIONS)
        else:
            await consumer.seek_to_end(*PARTITIONS)
        yield consumer
    finally:
        await consumer.stop()


async def records_of(
    bootstrap: str, nodes: Collection[str], count: int, timeout_s: float = 30
) -> list[ConsumerRecord[bytes, bytes]]:
    """The first ``count`` records of ``nodes`` on the topic, from its beginning, as read."""
    keys = {n.encode() for n in nodes}
    found: list[ConsumerRecord[bytes, bytes]] = []
    async with samples_consumer(bootstrap) as consumer, asyncio.timeout(timeout_s):
        while len(found) < count:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [r for r in records if r.key in keys]
    return found[:count]


async def node_samples_of(
    bootstrap: str, nodes: Collection[str], count: int, timeout_s: float = 30
) -> list[NodeSample]:
    """The first ``count`` records of ``nodes`` on the topic, from its beginning."""
    found = await records_of(bootstrap, nodes, count, timeout_s)
    return [decode(NodeSample, r.value) for r in found]


async def first_records(
    bootstrap: str, nodes: Collection[str], timeout_s: float = 30
) -> dict[str, ConsumerRecord[bytes, bytes]]:
    """Each node's first record on the topic, headers and all: a node's own past, to
    replay or to copy. (``records_of`` counts records as read, and one partition's batch
    can fill its count before another node's first record is read.)"""
    keys = {n.encode() for n in nodes}
    found: dict[bytes, ConsumerRecord[bytes, bytes]] = {}
    async with samples_consumer(bootstrap) as consumer, asyncio.timeout(timeout_s):
        while len(found) < len(keys):
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    if r.key in keys:
                        found.setdefault(r.key, r)
    return {key.decode(): record for key, record in found.items()}
