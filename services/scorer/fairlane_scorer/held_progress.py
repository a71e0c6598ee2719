"""The ``progress-held`` table behind :mod:`fairlane_scorer.core.holding`'s decisions.

Progress records whose placement has not arrived wait here (key = placement id,
co-partitioned with ``fairlane.placements.v1`` and ``fairlane.job-progress.v1``,
changelogged). Two agents touch it: the progress agent holds records, the placements
agent takes them when their placement arrives or ends. Each changes the table before its
first await and only then sends the changelog record (:meth:`Deliveries.log`), so a
record held while a ``created`` event is being written is either seen by that event or
finds the placement itself.

The table keeps one partition's rows next to the others'; this module's view groups them
by partition (a record's partition is its row's) and is rebuilt from the table after a
rebalance, when the recovery may have brought other rows.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import faust

from fairlane_scorer.core.holding import (
    HeldRecord,
    HeldRow,
    HoldChange,
    HoldConfig,
    Released,
    decode_held,
    encode_held,
    expire,
    hold,
    next_expiry_ms,
)
from fairlane_scorer.delivery import Deliveries

__all__ = ["ProgressHold"]


class ProgressHold:
    def __init__(self, config: HoldConfig, table: faust.Table[str, Any]) -> None:
        self._config, self._table = config, table
        self._view: dict[int, dict[str, HeldRow]] = defaultdict(dict)
        self._generation: int | None = None
        self._event_ms: dict[int, int] = {}  # partition -> its newest placement event's ts_ms
        # Per partition, kept with the view so that a record read costs no scan of it:
        self._counts: dict[int, int] = defaultdict(int)  # records held
        self._due_ms: dict[int, int | None] = {}  # next_expiry_ms (absent: to compute)

    def count(self) -> int:
        """Records held by this worker."""
        return sum(self._counts.values())

    def _rows(self, partition: int) -> dict[str, HeldRow]:
        generation = self._table.app.consumer_generation_id
        if generation != self._generation:
            self._generation = generation
            self._view.clear()
            self._counts.clear()
            self._due_ms.clear()
            for pid, stored in list(self._table.data.items()):
                row = decode_held(stored) if isinstance(stored, bytes) else stored
                self._table.data[pid] = row
                if row:
                    self._view[row[0].partition][pid] = row
                    self._counts[row[0].partition] += len(row)
        return self._view[partition]

    async def hold(self, pid: str, record: HeldRecord, out: Deliveries) -> list[Released]:
        """Hold ``record`` for ``pid``; what the caps pushed out (to be dead-lettered)."""
        rows = self._rows(record.partition)
        change = hold(rows, pid, record, self._config, self._counts[record.partition])
        await self._apply(record.partition, change, out)
        return change.dropped

    async def take(self, partition: int, pid: str, out: Deliveries) -> HeldRow:
        """The records held for ``pid``, out of the hold."""
        row = self._rows(partition).get(pid, ())
        if row:
            await self._apply(partition, HoldChange({pid: None}, []), out)
        return row

    async def expire(
        self, partition: int, out: Deliveries, event_ms: int | None = None
    ) -> list[Released]:
        """The records whose hold expired, out of the hold, now that the partition's event
        time is at least ``event_ms`` (None: as it was)."""
        if event_ms is not None:
            self._event_ms[partition] = max(event_ms, self._event_ms.get(partition, event_ms))
        now = self._event_ms.get(partition)
        rows = self._rows(partition)
        if partition not in self._due_ms:
            self._due_ms[partition] = next_expiry_ms(rows, self._config)
        due = self._due_ms[partition]
        if now is None or due is None or now <= due:
            return []
        change = expire(rows, now, self._config)
        await self._apply(partition, change, out)
        return change.dropped

    async def _apply(self, partition: int, change: HoldChange, out: Deliveries) -> None:
        rows, data = self._rows(partition), self._table.data
        self._due_ms.pop(partition, None)
        for pid, row in change.rows.items():  # the table first, with no await between
            self._counts[partition] += len(row or ()) - len(rows.get(pid, ()))
            if row is None:
                rows.pop(pid, None)
                data.pop(pid, None)
            else:
                rows[pid] = data[pid] = row
        for pid, row in change.rows.items():
            await out.log(self._table, partition, pid, None if row is None else encode_held(row))
