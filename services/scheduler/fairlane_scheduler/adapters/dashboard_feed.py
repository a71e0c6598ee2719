"""The dashboard's one producer of frames: every ``interval_s`` it draws the fleet from
the same fleet view, allocation cache and filter the API answers from (shared GPUs from
the placement service's in-memory ledger), reads live and pending placements from
Postgres once, and wakes every open page.

However many pages are open, the fleet is drawn and Postgres read once per interval,
and not at all while nobody watches (the score history is kept regardless, so a page
opened later still has the recent past to chart).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncGenerator, Awaitable, Callable, Collection, Mapping, Sequence

from fairlane_runtime.background import BackgroundLoop
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.core.dashboard import Frame, ScoreHistory, SharedGpus, rows_of
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.nodes import fleet_gpu_states
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import Placement

__all__ = ["DashboardFeed", "PlacementLists"]

log = logging.getLogger("fairlane.scheduler.dashboard")

#: Live placements (newest first) and the queue (in the order it is tried), from Postgres.
PlacementLists = Callable[[], Awaitable[tuple[Sequence[Placement], Sequence[Placement]]]]


class DashboardFeed(BackgroundLoop):
    def __init__(
        self,
        *,
        fleet: FleetView,
        allocated: Callable[[], Collection[str]],
        policy: PlacementPolicy,
        lists: PlacementLists,
        counters: Callable[[], Mapping[str, int]],
        clock_ms: Callable[[], int],
        outage: OutageLog,
        idle: Callable[[], frozenset[str]] = frozenset,
        shares: SharedGpus | None = None,
        interval_s: float = 1.0,
    ) -> None:
        super().__init__("dashboard-feed")
        self._fleet = fleet
        self._allocated = allocated
        self.policy = policy
        self._lists = lists
        self._counters = counters
        self._clock_ms = clock_ms
        self._outage = outage
        self._idle = idle  # the placements in an idle episode (the idle watch's last round)
        self._shares = shares  # what fractional placements hold of each GPU they share
        self._interval_s = interval_s
        self.history = ScoreHistory()
        self.watchers = 0
        self.latest: Frame | None = None
        self._seq = 0  # frames drawn so far
        self._changed = asyncio.Condition()

    async def run(self) -> None:
        while True:
            await self.tick()
            await asyncio.sleep(self._interval_s)

    async def tick(self) -> None:
        """Record the scores' history; draw a new frame if a page is open."""
        self.history.observe(self._fleet.drain_changed())  # not all 100k records a second
        if self.watchers == 0:  # no page open: hold no frame (a cell per GPU, 19 MiB at 100k)
            self.latest = None
            return
        await self._draw()

    async def _draw(self) -> None:
        now = self._clock_ms()
        states = fleet_gpu_states(self._fleet, self._allocated(), self.policy, now)
        rows = rows_of(self._fleet, states, self._shares)
        last = self.latest
        placements, pending = (last.placements, last.pending) if last else ((), ())
        try:
            placements, pending = await self._lists()
        except Exception as exc:  # noqa: BLE001 - sorted by OutageLog.record; frames go on
            self._outage.record(exc)  # the page keeps the last lists it had
        else:
            self._outage.succeeded()
        frame = Frame(
            seq=self._seq + 1,
            ts_ms=now,
            rows=rows,
            placements=placements,
            pending=pending,
            counters=dict(self._counters()),
            idle=self._idle(),
        )
        async with self._changed:
            self._seq = frame.seq
            self.latest = frame
            self._changed.notify_all()

    async def _next(self, seen: int) -> Frame:
        async with self._changed:
            while self.latest is None or self.latest.seq <= seen:
                await self._changed.wait()
            return self.latest

    async def frames(self) -> AsyncGenerator[Frame, None]:
        """The latest frame now, then each new one as it is drawn (a slow page skips
        frames rather than queueing them: the next diff covers what it missed)."""
        self.watchers += 1
        try:
            if self.latest is None:  # the first page since none was open: draw one now
                await self._draw()
            seen = 0
            while True:
                frame = await self._next(seen)
                seen = frame.seq
                yield frame
        finally:
            self.watchers -= 1
