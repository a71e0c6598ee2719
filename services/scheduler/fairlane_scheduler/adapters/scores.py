"""Keeps the fleet view current from the compacted scores and learned speeds topics.

No consumer group: every replica reads every partition from the beginning, so a fresh
start rebuilds the whole fleet's state, then follows new records. ``caught_up`` turns
true once every partition has been read up to where it ended when we started. A record
that fails validation is counted and logged, not dead-lettered: the topic is compacted,
so every replica, on every start, would dead-letter it again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterator
from functools import partial
from typing import Any, ClassVar, Generic, TypeVar

from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from prometheus_client.core import CounterMetricFamily, Metric
from prometheus_client.registry import Collector

from fairlane_events.codec import DecodeError, decode
from fairlane_events.records import GpuScore, GpuSpeed, Record
from fairlane_events.topics import GPU_SCORES, GPU_SPEEDS
from fairlane_runtime.errors import ServerUnavailableError
from fairlane_runtime.kafka import kafka_admin, topic_partitions
from fairlane_runtime.kafka_security import PLAINTEXT, KafkaSecurity
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.idle import IdleTracker

__all__ = [
    "FollowerCollector",
    "ScoresFollower",
    "SpeedsFollower",
    "TopicFollower",
    "read_from_beginning",
    "stop_following",
]

log = logging.getLogger("fairlane.scheduler.scores")
R = TypeVar("R", bound=Record)


async def read_from_beginning(
    bootstrap: str, topic: str, *, security: KafkaSecurity = PLAINTEXT
) -> tuple[AIOKafkaConsumer, list[TopicPartition]]:
    """A started consumer of every partition of ``topic``, at its first offsets, in no
    consumer group (every replica reads everything)."""
    admin = await kafka_admin(bootstrap, security=security)
    try:
        count = (await topic_partitions(admin, [topic])).get(topic)
    finally:
        await admin.close()
    if count is None:
        raise ServerUnavailableError(f"topic {topic} does not exist yet")
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        group_id=None,
        enable_auto_commit=False,
        **security.aiokafka_kwargs(),
    )
    await consumer.start()
    partitions = [TopicPartition(topic, p) for p in range(count)]
    consumer.assign(partitions)
    await consumer.seek_to_beginning(*partitions)
    return consumer, partitions


async def stop_following(
    task: asyncio.Task[None] | None, consumer: AIOKafkaConsumer | None
) -> None:
    """Cancel a follower's task and stop its consumer (either may not have started)."""
    if task is not None:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    if consumer is not None:
        await consumer.stop()


class TopicFollower(Generic[R]):
    """Reads one compacted topic of ``record_type`` into ``apply`` (which says whether it
    took the record: False for one older than what it holds). ``noun`` names a record in
    the log ("ignored bad score record ...", which operators and the chaos audit read)."""

    noun: ClassVar[str]

    def __init__(
        self,
        bootstrap: str,
        topic: str,
        record_type: type[R],
        apply: Callable[[R], bool],
        *,
        forget: Callable[[bytes], None] | None = None,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        self._bootstrap = bootstrap
        self._forget = forget  # a tombstone's key; None: what the view holds stays
        self._security = security
        self.topic = topic
        self._record_type = record_type
        self._apply = apply
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self._pending: dict[TopicPartition, int] = {}  # end offsets still to reach
        self.applied = 0  # records taken
        self.older = 0  # valid records older than what the view holds
        self.rejected = 0
        #: Tombstones read: deletes on the compacted topic, not bad records, handed to
        #: ``forget``. Without one the view keeps what it holds (a GPU's last score goes
        #: stale like that of any GPU that stops reporting).
        self.deleted = 0
        #: Called after each batch of records is applied: the extender's node summaries
        #: catch up here, off the request path (kube/wiring.py).
        self.after_batch: Callable[[], None] | None = None
        #: Set once :attr:`caught_up` (it never unsets).
        self.caught_up_event = asyncio.Event()

    @property
    def caught_up(self) -> bool:
        return self._consumer is not None and not self._pending

    async def start(self) -> None:
        consumer, partitions = await read_from_beginning(
            self._bootstrap, self.topic, security=self._security
        )
        ends = await consumer.end_offsets(partitions)
        self._pending = {tp: end for tp, end in ends.items() if end > 0}
        self._consumer = consumer
        self._task = asyncio.create_task(self._follow(consumer), name=f"{self.topic} follower")
        if not self._pending:
            self.caught_up_event.set()

    async def stop(self) -> None:
        await stop_following(self._task, self._consumer)

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=500, max_records=5000)
            for tp, messages in batches.items():
                for message in messages:
                    self._take(tp, message)
            if batches and self.after_batch is not None:
                try:
                    self.after_batch()
                except Exception:  # the follower must outlive a bug in a listener
                    log.exception("after-batch listener failed")
            for tp in list(self._pending):
                if await consumer.position(tp) >= self._pending[tp]:
                    del self._pending[tp]
                    if not self._pending:
                        self.caught_up_event.set()

    def _take(self, tp: TopicPartition, message: ConsumerRecord[bytes, bytes]) -> None:
        """One record: applied, older, rejected (counted and logged) or a tombstone."""
        if message.value is None:
            self.deleted += 1
            if self._forget is not None and message.key is not None:
                self._forget(message.key)
            return
        try:
            record = decode(self._record_type, message.value)
        except DecodeError as exc:
            self.rejected += 1
            log.warning("ignored bad %s record at %s@%d: %s", self.noun, tp, message.offset, exc)
            return
        if self._apply(record):
            self.applied += 1
        else:
            self.older += 1


class ScoresFollower(TopicFollower[GpuScore]):
    """``fairlane.gpu-scores.v1`` into the fleet view, and into the idle tracker when
    given (each record the view took); a tombstone removes its GPU from the view."""

    noun = "score"

    def __init__(
        self,
        bootstrap: str,
        fleet: FleetView,
        *,
        idle: IdleTracker | None = None,
        security: KafkaSecurity = PLAINTEXT,
    ) -> None:
        apply = fleet.apply if idle is None else partial(_apply_and_track, fleet, idle)
        super().__init__(
            bootstrap,
            GPU_SCORES,
            GpuScore,
            apply,
            forget=partial(_forget_gpu, fleet),
            security=security,
        )


def _forget_gpu(fleet: FleetView, key: bytes) -> None:
    """A tombstone of a GPU's uuid: the scorer forgot the GPU (silent past its expiry),
    so the fleet does too."""
    fleet.forget(key.decode(errors="replace"))


def _apply_and_track(fleet: FleetView, idle: IdleTracker, score: GpuScore) -> bool:
    taken = fleet.apply(score)
    if taken:
        idle.observe(score)
    return taken


class SpeedsFollower(TopicFollower[GpuSpeed]):
    """``fairlane.gpu-speeds.v1`` into the fleet view's learned speeds."""

    noun = "learned speed"

    def __init__(
        self, bootstrap: str, fleet: FleetView, *, security: KafkaSecurity = PLAINTEXT
    ) -> None:
        super().__init__(
            bootstrap,
            GPU_SPEEDS,
            GpuSpeed,
            fleet.apply_speed,
            forget=partial(_forget_speed, fleet),
            security=security,
        )


def _forget_speed(fleet: FleetView, key: bytes) -> None:
    """A tombstone of ``"<uuid>/<job class>"`` (a class holds no ``/``): the learner
    forgot that GPU under that class, so the fleet does too."""
    uuid, _, job_class = key.decode(errors="replace").rpartition("/")
    fleet.forget_speed(uuid, job_class)


class FollowerCollector(Collector):
    """``fairlane_scheduler_topic_records_total{topic,outcome}``: what each follower read,
    by outcome (applied, older than held, rejected as invalid, deleted: a tombstone)."""

    def __init__(self, scores: ScoresFollower, speeds: SpeedsFollower) -> None:
        self.scores, self.speeds = scores, speeds
        self.followers: tuple[TopicFollower[Any], ...] = (scores, speeds)

    def collect(self) -> Iterator[Metric]:
        family = CounterMetricFamily(
            "fairlane_scheduler_topic_records",
            "records the scheduler read from a compacted topic it follows, by outcome",
            labels=["topic", "outcome"],
        )
        for follower in self.followers:
            for outcome in ("applied", "older", "rejected", "deleted"):
                family.add_metric([follower.topic, outcome], getattr(follower, outcome))
        yield family
