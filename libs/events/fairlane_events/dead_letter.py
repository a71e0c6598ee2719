"""Building the dead-letter record for a rejected Kafka message."""

from __future__ import annotations

import base64

from fairlane_events.records import DeadLetter

__all__ = ["MAX_DEAD_LETTER_VALUE_BYTES", "dead_letter_for"]

#: Rejected values are kept up to this size (base64 grows it by a third); beyond it the
#: record says ``truncated`` and the full original stays at its topic/partition/offset.
MAX_DEAD_LETTER_VALUE_BYTES = 256 * 1024


def dead_letter_for(
    *,
    topic: str,
    partition: int,
    offset: int,
    key: bytes | None,
    value: bytes | None,
    error: str,
    now_ms: int,
) -> DeadLetter:
    raw = value or b""
    kept = raw[:MAX_DEAD_LETTER_VALUE_BYTES]
    return DeadLetter(
        schema_="dead-letter/1",
        ts_ms=now_ms,
        source_topic=topic,
        partition=partition,
        offset=offset,
        error=error[:2000],
        key_b64=None if key is None else base64.b64encode(key[:1024]).decode(),
        value_b64=base64.b64encode(kept).decode(),
        value_size=len(raw),
        truncated=len(kept) < len(raw),
    )
