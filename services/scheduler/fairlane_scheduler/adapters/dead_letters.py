"""Counts what the pipeline dead-lettered, for the dashboard: the scheduler reads
``fairlane.dead-letter.v1`` from the beginning (what Kafka still retains) and follows
it, counting records by the topic they were rejected from. The scorer is who rejects
node samples and placement events; Prometheus has the same from the scorer's own
``fairlane_scorer_dead_lettered_total`` (since that scorer started)."""

from __future__ import annotations

import asyncio
import logging
from collections import Counter

from aiokafka import AIOKafkaConsumer

from fairlane_events.codec import DecodeError, decode
from fairlane_events.records import DeadLetter
from fairlane_events.topics import DEAD_LETTER
from fairlane_runtime.errors import ServerUnavailableError
from fairlane_runtime.kafka_security import PLAINTEXT, KafkaSecurity
from fairlane_scheduler.adapters.scores import read_from_beginning, stop_following

__all__ = ["DeadLetterTally"]

log = logging.getLogger("fairlane.scheduler.dead_letters")

UNREADABLE = "(unreadable dead letter)"


class DeadLetterTally:
    def __init__(self, bootstrap: str, *, security: KafkaSecurity = PLAINTEXT) -> None:
        self._bootstrap = bootstrap
        self._security = security
        self.counts: Counter[str] = Counter()  # source topic -> records dead-lettered
        self._consumer: AIOKafkaConsumer | None = None
        self._task: asyncio.Task[None] | None = None
        self.available = True  # False: the topic could not be read (see start)

    async def start(self) -> None:
        """Follow the dead-letter topic; if this principal cannot see it (ACLs) or it does
        not exist yet, the dashboard says the counts are unavailable and the scheduler
        runs on: the counts are for people, nothing decides by them."""
        try:
            self._consumer, _ = await read_from_beginning(
                self._bootstrap, DEAD_LETTER, security=self._security
            )
        except ServerUnavailableError as exc:
            log.warning("dead-letter counts unavailable on the dashboard: %s", exc)
            self.available = False
            return
        self._task = asyncio.create_task(self._follow(self._consumer), name="dead-letters")

    async def stop(self) -> None:
        await stop_following(self._task, self._consumer)

    def as_counters(self) -> dict[str, int]:
        if not self.available:
            return {}
        return {f"dead-lettered from {topic}": n for topic, n in sorted(self.counts.items())}

    async def _follow(self, consumer: AIOKafkaConsumer) -> None:
        while True:
            batches = await consumer.getmany(timeout_ms=1000, max_records=5000)
            for messages in batches.values():
                for message in messages:
                    try:
                        self.counts[decode(DeadLetter, message.value).source_topic] += 1
                    except DecodeError:
                        self.counts[UNREADABLE] += 1
