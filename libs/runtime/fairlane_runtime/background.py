"""A service's background loop: :meth:`BackgroundLoop.start` runs :meth:`~BackgroundLoop.run`
in a task of its own, :meth:`~BackgroundLoop.stop` cancels it and waits for it to end.
Subclasses write the loop; the lifecycle is the same for all of them."""

from __future__ import annotations

import asyncio
import contextlib
from abc import ABC, abstractmethod

__all__ = ["BackgroundLoop"]


class BackgroundLoop(ABC):
    def __init__(self, name: str) -> None:
        self._name = name
        self._task: asyncio.Task[None] | None = None

    @abstractmethod
    async def run(self) -> None:
        """The loop; it runs until cancelled, so it handles its own errors."""

    async def start(self) -> None:
        self._task = asyncio.create_task(self.run(), name=self._name)

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
