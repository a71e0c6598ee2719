"""A background step run every ``interval_s`` in a task of its own: started and stopped
with the service, a failing step recorded in the dependency's :class:`OutageLog` (two log
lines per outage, not one per attempt) and tried again one interval later."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from fairlane_runtime.background import BackgroundLoop
from fairlane_runtime.outage import OutageLog

__all__ = ["Periodic"]


class Periodic(BackgroundLoop):
    def __init__(
        self,
        name: str,
        step: Callable[[], Awaitable[None]],
        interval_s: float,
        outage: OutageLog,
        *,
        wait_first: bool = False,
    ) -> None:
        """``wait_first``: the first step comes one interval after :meth:`start` (for a
        caller that took one step itself before starting)."""
        super().__init__(name)
        self._step = step
        self._interval_s = interval_s
        self._outage = outage
        self._wait_first = wait_first

    async def run(self) -> None:
        if self._wait_first:
            await asyncio.sleep(self._interval_s)
        while True:
            try:
                await self._step()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - sorted by OutageLog; the loop goes on
                self._outage.record(exc)
            else:
                self._outage.succeeded()
            await asyncio.sleep(self._interval_s)
