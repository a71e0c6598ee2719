"""Keeps the placement service's in-memory view in step with what every replica
committed: live holdings, quotas and cordons, re-read in the background every second
(the service's own commits reach it at once, from each transaction's result). Answers
that must not wait on the database (the kube-scheduler extender has a 5 s budget for
the whole call) read :attr:`LiveGpusCache.current`. While Postgres is away the view
stays as last known; the outage is logged when it starts and when it ends, not every
second."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Collection

from fairlane_runtime.outage import OutageLog

__all__ = ["LiveGpusCache"]

log = logging.getLogger("fairlane.scheduler.live_gpus")


class LiveGpusCache:
    def __init__(
        self,
        refresh: Callable[[], Awaitable[None]],
        allocated: Callable[[], Collection[str]],
        outage: OutageLog,
        refresh_s: float = 1.0,
    ) -> None:
        self.refresh = refresh
        self._allocated = allocated
        self._outage = outage
        self._refresh_s = refresh_s
        self._task: asyncio.Task[None] | None = None

    @property
    def current(self) -> Collection[str]:
        """GPUs that live placements hold (or this replica is placing on)."""
        return self._allocated()

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
