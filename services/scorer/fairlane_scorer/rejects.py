"""Dead-lettering a consumed record: the one way every agent rejects what it cannot use."""

from __future__ import annotations

import logging
import time
from typing import Protocol

import faust

from fairlane_events.codec import encode
from fairlane_events.dead_letter import dead_letter_for
from fairlane_scorer.delivery import Deliveries

__all__ = ["Consumed", "dead_letter"]

log = logging.getLogger("fairlane.scorer")


class Consumed(Protocol):
    """Where a rejected record was read, and what it was (a Faust ``Message`` is one)."""

    @property
    def topic(self) -> str: ...
    @property
    def partition(self) -> int: ...
    @property
    def offset(self) -> int: ...
    @property
    def key(self) -> bytes | None: ...
    @property
    def value(self) -> bytes | None: ...


async def dead_letter(out: Deliveries, topic: faust.TopicT, msg: Consumed, error: str) -> None:
    """Send ``msg`` to the dead-letter ``topic`` with ``error`` and its origin (the
    caller counts it)."""
    record = dead_letter_for(
        topic=msg.topic,
        partition=msg.partition,
        offset=msg.offset,
        key=msg.key,
        value=msg.value,
        error=error,
        now_ms=int(time.time() * 1000),
    )
    await out.send(topic.get_topic_name(), None, encode(record))
    log.warning("dead-lettered %s[%d]@%d: %s", msg.topic, msg.partition, msg.offset, error)
