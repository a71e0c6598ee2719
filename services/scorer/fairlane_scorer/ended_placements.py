"""Placements that ended, kept a while for their last progress reports.

A job's last reports and its placement's end event travel on two topics, so a worker
(most of all one reading a backlog) may read the end first. The ``placement-gpus`` row of
an ended placement therefore stays, and this ``placement-ended`` table (key = placement
id, co-partitioned with the placements topic, changelogged) says when it ended, so that
only windows that began before the end are learned (:func:`join_progress`). Once the
partition's event time (the newest placement event read from it, one from the future
counting as now: the progress hold's clock) passed the end by ``keep_s``, both rows go.

Like :class:`fairlane_scorer.held_progress.ProgressHold`, the rows are grouped by
partition in a view rebuilt from the table after a rebalance, so that an expiry check
costs no scan of the table.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any

import faust
import orjson

from fairlane_scorer.delivery import Deliveries

__all__ = ["EndedPlacements"]


class EndedPlacements:
    def __init__(self, keep_s: float, table: faust.Table[str, Any]) -> None:
        self._keep_ms, self._table = int(keep_s * 1000), table
        self._view: dict[int, dict[str, int]] = defaultdict(dict)  # partition -> pid -> end
        self._generation: int | None = None
        self._clock_ms: dict[int, int] = {}  # partition -> its newest placement event
        self._first_ms: dict[int, int] = {}  # partition -> its earliest end (absent: none)

    def ended_ms(self, pid: str) -> int | None:
        """When placement ``pid`` ended (None: it did not, or ended too long ago)."""
        stored = self._table.data.get(pid)
        if stored is None:
            return None
        _, ended = orjson.loads(stored) if isinstance(stored, bytes) else stored
        return int(ended)

    async def end(self, partition: int, pid: str, ended_ms: int, out: Deliveries) -> None:
        """Placement ``pid`` ended at ``ended_ms`` (a redelivered end keeps the first)."""
        rows = self._rows(partition)
        ended = min(ended_ms, rows.get(pid, ended_ms))
        rows[pid] = ended
        self._first_ms[partition] = min(ended, self._first_ms.get(partition, ended))
        self._table.data[pid] = [partition, ended]  # before the first await
        await out.log(self._table, partition, pid, orjson.dumps([partition, ended]))

    async def expire(self, partition: int, clock_ms: int, out: Deliveries) -> list[str]:
        """The placements of ``partition`` that ended more than ``keep_s`` before its
        event time, now at least ``clock_ms``: out of this table (the caller drops their
        ``placement-gpus`` rows)."""
        now = self._clock_ms[partition] = max(clock_ms, self._clock_ms.get(partition, clock_ms))
        rows = self._rows(partition)
        first = self._first_ms.get(partition)
        if first is None or now <= first + self._keep_ms:
            return []
        gone = [pid for pid, ended in rows.items() if ended + self._keep_ms < now]
        for pid in gone:
            del rows[pid]
            self._table.data.pop(pid, None)
        if rows:
            self._first_ms[partition] = min(rows.values())
        else:
            del self._first_ms[partition]
        for pid in gone:
            await out.log(self._table, partition, pid, None)
        return gone

    def _rows(self, partition: int) -> dict[str, int]:
        generation = self._table.app.consumer_generation_id
        if generation != self._generation:
            self._generation = generation
            self._view.clear()
            self._first_ms.clear()
            for pid, stored in list(self._table.data.items()):
                owner, ended = orjson.loads(stored) if isinstance(stored, bytes) else stored
                self._table.data[pid] = [owner, ended]
                self._view[owner][pid] = ended
                self._first_ms[owner] = min(ended, self._first_ms.get(owner, ended))
        return self._view[partition]
