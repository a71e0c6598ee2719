"""An in-memory copy of the GPUs live placements hold, refreshed from Postgres in the
background, for answers that must not wait on the database (the kube-scheduler extender
has a 5 s budget for the whole call)."""

from __future__ import annotations

import asyncio
import contextlib
import logging

from fairlane_scheduler.adapters.store import PlacementStore
from fairlane_scheduler.errors import SchedulerError

__all__ = ["LiveGpusCache"]

log = logging.getLogger("fairlane.scheduler.live_gpus")


class LiveGpusCache:
    def __init__(self, store: PlacementStore, refresh_s: float = 1.0) -> None:
        self._store = store
        self._refresh_s = refresh_s
        self.current: frozenset[str] = frozenset()
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.current = frozenset(await self._store.live_gpus())
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
                self.current = frozenset(await self._store.live_gpus())
            except SchedulerError as exc:
                log.warning("keeping the last known allocations: %s", exc)
