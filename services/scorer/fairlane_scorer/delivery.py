"""Acknowledge a record only after Kafka has what processing it produced.

Faust commits the offsets of acked events and, before it commits, flushes its producer
buffer; but that flush does not wait for a message already taken off the buffer and
still on its way into aiokafka, and it gives up after 0.1 s without progress. A kill -9
could then leave a committed offset ahead of the table's changelog, and the restarted
worker would never see the lost samples again. So the agents' batches
(:mod:`fairlane_scorer.batches`) write table rows and records through
:class:`Deliveries`, wait until every one of them is acknowledged by the broker, and only
then report the batch's records processed: a committed offset always has its state in
the changelog.
A record processed twice after a crash is harmless (samples not newer than a GPU's last
one are ignored, placement events are idempotent).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Iterable
from typing import Any

from faust import Table
from faust.types import ProducerT

__all__ = ["Deliveries"]


class Deliveries:
    """What a batch of events produced, and the futures of its delivery. Records go to
    the producer directly (one aiokafka send each), not through Faust's per-message
    topic machinery, which was most of the scorer's time per record; score records,
    the most numerous, go into one aiokafka batch per partition (:meth:`publish`)."""

    def __init__(self, producer: ProducerT) -> None:
        self._producer = producer
        self._futures: list[Awaitable[Any]] = []
        self._batches: dict[tuple[str, int], Any] = {}  # open aiokafka BatchBuilders

    async def write(
        self,
        table: Table[Any, Any],
        partition: int,
        key: Any,
        value: Any,
        encoded: bytes | None = None,
    ) -> None:
        """``table[key] = value`` from an event of ``partition``: ``encoded`` (the value
        as the changelog carries it; default: the table's serializer) to the changelog,
        ``value`` into the table.
        Reassign, never mutate a value in place: only what is written reaches the
        changelog."""
        if encoded is None:
            changelog = table.changelog_topic
            encoded, _ = changelog.prepare_value(value, table.value_serializer)
        await self.log(table, partition, key, encoded)
        table.data[key] = value

    async def delete(self, table: Table[Any, Any], partition: int, key: Any) -> None:
        """``del table[key]`` from an event of ``partition``: a tombstone to the changelog
        (recovery drops the key), the key out of the table."""
        await self.log(table, partition, key, None)
        table.data.pop(key, None)

    async def log(
        self, table: Table[Any, Any], partition: int, key: Any, encoded: bytes | None
    ) -> None:
        """Only the changelog record of ``table[key] = encoded`` (None: a tombstone), for
        a caller that changed the table itself before its first await (so that another
        agent's coroutine, running at that await, sees the change)."""
        changelog = table.changelog_topic
        raw_key, _ = changelog.prepare_key(key, table.key_serializer)
        await self.send(changelog.get_topic_name(), raw_key, encoded, partition=partition)

    async def send(
        self,
        topic: str,
        key: bytes | None,
        value: bytes | None,
        *,
        partition: int | None = None,
        timestamp: float | None = None,
    ) -> None:
        self._futures.append(
            await self._producer.send(topic, key, value, partition, timestamp, None)
        )

    async def publish_all(
        self, topic: str, records: Iterable[tuple[int, bytes, bytes, int]]
    ) -> None:
        """Send ``(partition, key, value, timestamp_ms)`` records, each into its
        partition's batch: a few microseconds per record, where :meth:`send` (Faust's
        producer, then aiokafka's ``send``: metadata wait, partitioner, accumulator) took
        about a hundred. A batch goes out when it is full, and at the latest in
        :meth:`settle`; only then is there something to await."""
        batches = self._batches
        for partition, key, value, timestamp_ms in records:
            batch = batches.get((topic, partition))
            if batch is not None and batch.append(timestamp=timestamp_ms, key=key, value=value):
                continue
            if batch is not None:
                await self._submit(topic, partition)
            # Faust wraps aiokafka's producer without its batch interface.
            batch = batches[topic, partition] = _kafka(self._producer).create_batch()
            if batch.append(timestamp=timestamp_ms, key=key, value=value) is None:
                raise ValueError(f"a record of {len(value)} bytes does not fit a batch")

    async def partition_of(self, topic: str, key: bytes) -> int:
        """The partition the producer's partitioner gives ``key`` (as :meth:`send` would
        choose it), once the topic's metadata is known."""
        await _kafka(self._producer).partitions_for(topic)
        return self._producer.key_partition(topic, key).partition

    async def _submit(self, topic: str, partition: int) -> None:
        batch = self._batches.pop((topic, partition))
        batch.close()
        kafka = _kafka(self._producer)
        self._futures.append(await kafka.send_batch(batch, topic, partition=partition))

    async def flush(self) -> Awaitable[Any]:
        """Hand everything written so far to the producer; what it returns completes
        when the broker has acknowledged all of it (and raises if any delivery failed).
        Records of one partition reach the broker in the order they were written:
        aiokafka has one request in flight per broker, and queues a partition's batches
        behind each other."""
        for topic, partition in list(self._batches):
            await self._submit(topic, partition)
        futures, self._futures = self._futures, []
        return asyncio.gather(*futures)

    async def settle(self) -> None:
        """Wait until the broker has acknowledged everything written so far."""
        await (await self.flush())


def _kafka(producer: ProducerT) -> Any:
    """The aiokafka producer under Faust's (its aiokafka driver's own accessor)."""
    return producer._ensure_producer()  # type: ignore[attr-defined]
