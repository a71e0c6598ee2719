"""Progress records held until their placement arrives (pure: time is the records' own).

The placement events and the progress records are two topics read side by side, so a
worker reading a backlog of both (a new consumer group, a restart after placements were
made while it was down) may meet a progress record before its placement's ``created``
event. Such a record is held, in the ``progress-held`` table (key = placement id,
co-partitioned with both topics and changelogged, so it survives kill -9), until:

- its placement arrives: it is joined and learned as if it had come just then;
- its placement ends first (its ``created`` event was never seen): it is dead-lettered
  as ``unknown_placement``;
- the hold expires: the partition's event time (the newest ``ts_ms`` of the placement
  events read from it, one stamped ahead of the scorer's clock counting as now) passed
  the record's ``ts_ms`` by more than ``hold_s``: dead-lettered as ``unknown_placement``;
- the hold overflows: more than ``per_placement`` records of one placement, or more
  than ``total`` in the partition: the oldest go, as ``hold_full``.

Expiry is decided by the records' times, not the wall clock, so a replay of the same
records decides the same. The clock is the scheduler's (placement events), not the
jobs': a job whose clock runs ahead cannot expire other jobs' records, and a hold cannot
run out while the placements' partition is still behind (in a backlog the placements,
far fewer than the reports, are usually read ahead of them). A partition that reads no
placement event keeps what it holds (at most ``total``) until one comes. A record held
twice (redelivered after a crash, before its offset was committed) is held once: a
record is known by its (partition, offset).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from fairlane_scorer.core.progress import HOLD_FULL, UNKNOWN_PLACEMENT
from fairlane_scorer.errors import HeldRowFormatError

__all__ = [
    "HeldRecord",
    "HeldRow",
    "HoldChange",
    "HoldConfig",
    "Released",
    "decode_held",
    "encode_held",
    "expire",
    "hold",
    "next_expiry_ms",
]

_FORMAT = "progress-held/1"

#: A placement's held records, oldest first.
HeldRow = tuple["HeldRecord", ...]


@dataclass(frozen=True)
class HoldConfig:
    hold_s: float = 900.0  # event time a record waits for its placement
    per_placement: int = 64  # records held for one placement
    total: int = 10_000  # records held in one partition

    def __post_init__(self) -> None:
        if self.hold_s <= 0 or self.per_placement < 1 or self.total < 1:
            raise ValueError("hold_s > 0, per_placement >= 1 and total >= 1 required")


@dataclass(frozen=True)
class HeldRecord:
    """A progress record as it was read (its origin and bytes, for the learner or the
    dead-letter topic) and its window's end."""

    partition: int
    offset: int
    ts_ms: int
    value: bytes


@dataclass(frozen=True)
class Released:
    """A held record that leaves the hold unlearned: its placement and why."""

    placement_id: str
    record: HeldRecord
    reason: str
    error: str


@dataclass(frozen=True)
class HoldChange:
    """The rows to write (None: delete the row) and the records dropped from the hold."""

    rows: dict[str, HeldRow | None]
    dropped: list[Released]


def hold(
    rows: Mapping[str, HeldRow],
    placement_id: str,
    record: HeldRecord,
    config: HoldConfig,
    count: int | None = None,
) -> HoldChange:
    """``rows`` (one partition's, holding ``count`` records: None, count them) with
    ``record`` held for ``placement_id``; the oldest records go (``hold_full``) where a
    cap overflows. Holding a record already held changes nothing."""
    row = rows.get(placement_id, ())
    if any((r.partition, r.offset) == (record.partition, record.offset) for r in row):
        return HoldChange({}, [])
    changed: dict[str, HeldRow | None] = {
        placement_id: tuple(sorted((*row, record), key=lambda r: (r.ts_ms, r.offset)))
    }
    dropped: list[Released] = []

    def drop(pid: str, why: str) -> None:
        current = changed.get(pid, rows.get(pid, ())) or ()
        dropped.append(Released(pid, current[0], HOLD_FULL, why))
        changed[pid] = current[1:] or None

    while len(changed[placement_id] or ()) > config.per_placement:
        drop(placement_id, f"more than {config.per_placement} records held for its placement")
    if count is None:
        count = sum(len(r) for r in rows.values())
    count += 1 - len(dropped)
    if count <= config.total:
        return HoldChange(changed, dropped)
    held = {**rows, **changed}
    while count > config.total:
        oldest = min((r[0].ts_ms, pid) for pid, r in held.items() if r)[1]
        drop(oldest, f"more than {config.total} progress records held in partition")
        held[oldest] = changed[oldest]
        count -= 1
    return HoldChange(changed, dropped)


def next_expiry_ms(rows: Mapping[str, HeldRow], config: HoldConfig) -> int | None:
    """The event time after which the oldest held record expires (None: none held)."""
    oldest = min((r[0].ts_ms for r in rows.values() if r), default=None)
    return None if oldest is None else oldest + int(config.hold_s * 1000)


def expire(rows: Mapping[str, HeldRow], event_ms: int, config: HoldConfig) -> HoldChange:
    """The records whose placement did not arrive within ``hold_s`` of their ``ts_ms``,
    now that the partition's event time is ``event_ms``."""
    horizon = event_ms - config.hold_s * 1000
    changed: dict[str, HeldRow | None] = {}
    dropped: list[Released] = []
    for pid, row in rows.items():
        stale = [r for r in row if r.ts_ms < horizon]
        if not stale:
            continue
        why = f"no placement {pid!r} within {config.hold_s:g} s of its ts_ms"
        dropped.extend(Released(pid, r, UNKNOWN_PLACEMENT, why) for r in stale)
        changed[pid] = row[len(stale) :] or None  # a row is sorted by ts_ms
    return HoldChange(changed, dropped)


def encode_held(row: HeldRow) -> bytes:
    return orjson.dumps(
        {
            "format": _FORMAT,
            "records": [[r.partition, r.offset, r.ts_ms, r.value.decode()] for r in row],
        }
    )


def decode_held(data: bytes) -> HeldRow:
    """A row :func:`encode_held` wrote, or :class:`HeldRowFormatError`."""
    try:
        raw: Any = orjson.loads(data)
        if raw.get("format") != _FORMAT:
            raise HeldRowFormatError(f"unknown held-progress format {raw.get('format')!r}")
        return tuple(
            HeldRecord(int(p), int(o), int(t), str(v).encode()) for p, o, t, v in raw["records"]
        )
    except (orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, HeldRowFormatError):
            raise
        raise HeldRowFormatError(f"not a held-progress row: {exc!r}") from exc
