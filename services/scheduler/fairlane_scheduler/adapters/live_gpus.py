"""Keeps the placement service's in-memory view in step with what every replica
committed: live holdings, quotas and cordons, re-read in the background every second
(the service's own commits reach it at once, from each transaction's result). Answers
that must not wait on the database (the kube-scheduler extender has a 5 s budget for
the whole call) read :attr:`LiveGpusCache.current`. While Postgres is away the view
stays as last known; the outage is logged when it starts and when it ends, not every
second."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Collection

from fairlane_runtime.outage import OutageLog
from fairlane_runtime.periodic import Periodic

__all__ = ["LiveGpusCache"]


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
        self._loop = Periodic("live-gpus", refresh, refresh_s, outage, wait_first=True)

    @property
    def current(self) -> Collection[str]:
        """GPUs that live placements hold (or this replica is placing on)."""
        return self._allocated()

    async def start(self) -> None:
        await self.refresh()
        await self._loop.start()

    async def stop(self) -> None:
        await self._loop.stop()
