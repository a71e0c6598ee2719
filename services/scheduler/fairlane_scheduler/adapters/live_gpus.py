"""In-memory copies of what Postgres knows and decisions need every time: the GPUs live
placements hold, and the cordoned nodes (into the fleet view). Refreshed in the
background every second, so answers that must not wait on the database (the
kube-scheduler extender has a 5 s budget for the whole call) never do."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fairlane_scheduler.adapters.store import PlacementStore
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.errors import SchedulerError

__all__ = ["LiveGpusCache"]

log = logging.getLogger("fairlane.scheduler.live_gpus")


class LiveGpusCache:
    def __init__(self, store: PlacementStore, fleet: FleetView, refresh_s: float = 1.0) -> None:
        self._store = store
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
            except SchedulerError as exc:
                log.warning("keeping the last known allocations and cordons: %s", exc)

    async def refresh(self) -> None:
        self.current = frozenset(await self._store.live_gpus())
        self._fleet.cordoned = frozenset(await self._store.cordoned())
