"""In-memory copies of what Postgres knows and decisions need every time: the GPUs live
placements hold, and the cordoned nodes (into the fleet view). Refreshed in the
background every second, so answers that must not wait on the database (the
kube-scheduler extender has a 5 s budget for the whole call) never do. While Postgres is
away the copies stay as last known; the outage is logged when it starts and when it
ends, not every second."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.adapters.store import PlacementStore
from fairlane_scheduler.core.fleet import FleetView

__all__ = ["LiveGpusCache"]

log = logging.getLogger("fairlane.scheduler.live_gpus")


class LiveGpusCache:
    def __init__(
        self,
        store: PlacementStore,
        fleet: FleetView,
        outage: OutageLog,
        refresh_s: float = 1.0,
    ) -> None:
        self._store = store
        self._outage = outage
        self._fleet = fleet
        self._refresh_s = refresh_s
        self.current: frozenset[str] = frozenset()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.refresh()
        self._task = asyncio.create_task(self._refresh(), name="live-gpus")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _refresh(self) -> None:
        while True:
            await asyncio.sleep(self._refresh_s)
            try:
                await self.refresh()
            except Exception as exc:  # noqa: BLE001 - sorted by OutageLog.record; loop goes on
                self._outage.record(exc)
            else:
                self._outage.succeeded()

    async def refresh(self) -> None:
        self.current = frozenset(await self._store.live_gpus())
        self._fleet.cordoned = frozenset(await self._store.cordoned())
