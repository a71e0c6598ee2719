"""The launcher's Kafka: progress out, degraded and idle events in. Best effort, always.

Kafka is never a reason for a job to stop or fail. :class:`ProgressPublisher` holds at
most ``buffer`` records while Kafka is away (the oldest go first, counted) and says so
in one warning line, and one more when it is back. :class:`PlacementWatcher` reads the
placements topic without a consumer group (the ``fairlane-launcher`` principal may
read the topic, not join groups): it assigns itself the one partition that holds the
placement's key, starts at its end, and hands on the placement's ``degraded`` and
``idle`` events.
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.errors import KafkaError
from aiokafka.partitioner import murmur2

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.records import JobProgress, PlacementEvent
from fairlane_events.topics import JOB_PROGRESS, PLACEMENTS, STREAM_PARTITIONS
from fairlane_runtime.kafka_security import KafkaSecurity

__all__ = ["WATCHED_EVENTS", "PlacementWatcher", "ProgressPublisher", "partition_of"]

log = logging.getLogger("fairlane.launcher")

_START_TIMEOUT_S = 10.0
_KAFKA_ERRORS = (KafkaError, OSError, TimeoutError)


def partition_of(key: bytes, partitions: int) -> int:
    """The partition Kafka's default partitioner gives ``key`` (murmur2, as the
    scheduler's outbox and aiokafka's producer do)."""
    return (int(murmur2(key)) & 0x7FFFFFFF) % partitions


class ProgressPublisher:
    """Sends progress records to ``fairlane.job-progress.v1``, keyed by placement id."""

    def __init__(
        self, bootstrap: str, security: KafkaSecurity, *, buffer: int, retry_s: float
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._retry_s = retry_s
        self._pending: deque[JobProgress] = deque(maxlen=buffer)
        self._wake = asyncio.Event()
        self._empty = asyncio.Event()
        self._empty.set()
        self._producer: AIOKafkaProducer | None = None
        self._away = False
        self.sent = 0
        self.dropped = 0

    def offer(self, record: JobProgress) -> None:
        if len(self._pending) == self._pending.maxlen:
            self.dropped += 1
        self._pending.append(record)
        self._empty.clear()
        self._wake.set()

    async def drained(self) -> None:
        """Until nothing is pending."""
        await self._empty.wait()

    @property
    def backlog(self) -> int:
        return len(self._pending)

    async def run(self) -> None:
        """Until cancelled: send what is pending, waiting ``retry_s`` after a failure."""
        while True:
            await self._wake.wait()
            self._wake.clear()
            try:
                await self._send_pending()
            except _KAFKA_ERRORS as exc:
                await self._drop_producer()
                if not self._away:
                    self._away = True
                    log.warning(
                        "Kafka is not reachable at %s (%s): progress is held (at most %d "
                        "records) and the job goes on",
                        self._bootstrap,
                        type(exc).__name__,
                        self._pending.maxlen,
                    )
                await asyncio.sleep(self._retry_s)
                self._wake.set()

    async def _send_pending(self) -> None:
        if self._producer is None:
            producer = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap, acks="all", **self._security.aiokafka_kwargs()
            )
            try:
                await asyncio.wait_for(producer.start(), _START_TIMEOUT_S)
            except BaseException:
                await producer.stop()
                raise
            self._producer = producer
        while self._pending:
            # Taken out while in flight: a full buffer meanwhile drops the oldest waiting
            # record, not this one; a failed send puts it back first in line.
            record = self._pending.popleft()
            try:
                await asyncio.wait_for(
                    self._producer.send_and_wait(
                        JOB_PROGRESS, encode(record), key=record.placement_id.encode()
                    ),
                    _START_TIMEOUT_S,
                )
            except BaseException:
                if len(self._pending) == self._pending.maxlen:
                    self.dropped += 1
                else:
                    self._pending.appendleft(record)
                raise
            self.sent += 1
        self._empty.set()
        if self._away:
            self._away = False
            log.warning("Kafka is back: progress is published again")

    async def _drop_producer(self) -> None:
        if self._producer is not None:
            producer, self._producer = self._producer, None
            await producer.stop()

    async def close(self) -> None:
        await self._drop_producer()


#: The events of a running placement that its launcher acts on.
WATCHED_EVENTS = ("degraded", "idle")


class PlacementWatcher:
    """Follows the placement's partition of ``fairlane.placements.v1`` from its end."""

    def __init__(
        self,
        bootstrap: str,
        security: KafkaSecurity,
        placement_id: str,
        on_event: Callable[[PlacementEvent], None],
        *,
        retry_s: float,
    ) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self._placement_id = placement_id
        self._on_event = on_event
        self._retry_s = retry_s
        self.settled = asyncio.Event()  # positioned, or the first attempt failed

    async def run(self) -> None:
        """Until cancelled. ``settled`` is set once positioned at the end of the partition,
        or when the first attempt failed (the job need not wait for Kafka)."""
        warned = False
        while True:
            consumer = AIOKafkaConsumer(
                bootstrap_servers=self._bootstrap,
                group_id=None,
                enable_auto_commit=False,
                **self._security.aiokafka_kwargs(),
            )
            try:
                await asyncio.wait_for(consumer.start(), _START_TIMEOUT_S)
                await self._follow(consumer)
            except _KAFKA_ERRORS as exc:
                self.settled.set()
                if not warned:
                    warned = True
                    log.warning(
                        "cannot read degraded events from Kafka at %s (%s); retrying every "
                        "%.0f s, the job goes on",
                        self._bootstrap,
                        type(exc).__name__,
                        self._retry_s,
                    )
            finally:
                await consumer.stop()
            await asyncio.sleep(self._retry_s)

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        partitions = consumer.partitions_for_topic(PLACEMENTS)
        if not partitions:
            await consumer.topics()  # fetches the metadata the line above found missing
            partitions = consumer.partitions_for_topic(PLACEMENTS)
        count = len(partitions) if partitions else STREAM_PARTITIONS
        tp = TopicPartition(PLACEMENTS, partition_of(self._placement_id.encode(), count))
        consumer.assign([tp])
        await consumer.seek_to_end(tp)
        await consumer.position(tp)
        self.settled.set()
        while True:
            batches = await consumer.getmany(tp, timeout_ms=500)
            for message in batches.get(tp, ()):
                if message.key != self._placement_id.encode():
                    continue
                try:
                    event = decode(PlacementEvent, message.value)
                except DecodeError:  # the scorer dead-letters it; the job has no use for it
                    continue
                if event.event in WATCHED_EVENTS:
                    self._on_event(event)
