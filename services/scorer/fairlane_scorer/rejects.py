"""Dead-lettering a consumed record: the one way every agent rejects what it cannot use."""

from __future__ import annotations

import logging
import time

import faust
from faust.types import Message

from fairlane_events.codec import encode
from fairlane_events.dead_letter import dead_letter_for
from fairlane_scorer.delivery import Deliveries

__all__ = ["dead_letter"]

log = logging.getLogger("fairlane.scorer")


async def dead_letter(out: Deliveries, topic: faust.TopicT, msg: Message, error: str) -> None:
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
