"""A background step run every ``interval_s`` in a task of its own: started and stopped
with the service, a failing step recorded in the dependency's :class:`OutageLog` (two log
lines per outage, not one per attempt) and tried again one interval later."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from fairlane_runtime.outage import OutageLog

__all__ = ["Periodic"]


class Periodic:
    def __init__(
        self, name: str, step: Callable[[], Awaitable[None]], interval_s: float, outage: OutageLog
    ) -> None:
        self._name = name
        self._step = step
        self._interval_s = interval_s
        self._outage = outage
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    async def _run(self) -> None:
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
