"""Logging a dependency's outage as two lines, not one per retry.

A background loop that retries while Postgres or Kafka is away would otherwise log
every attempt (with a traceback, if it logs the exception). :class:`OutageLog` logs
one warning when the dependency goes away, one when it is back (with how long and how
many attempts failed), and counts every failed attempt in /metrics. Errors that are
not an outage (a bug, a broken invariant) are the caller's to log with their traceback.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from fairlane_events.errors import FairlaneError

__all__ = ["FailureCounter", "OutageLog"]


class FailureCounter(Protocol):
    """What a prometheus ``Counter`` (or one of its labelled children) offers."""

    def inc(self, amount: float = 1) -> None: ...


class OutageLog:
    """The outage state of one component's dependency: up, or down since when."""

    def __init__(
        self,
        logger: logging.Logger,
        component: str,
        failures: FailureCounter,
        *,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._log = logger
        self._component = component
        self._failures = failures
        self._clock = clock
        self._down_since: float | None = None
        self._failed_attempts = 0

    @property
    def is_down(self) -> bool:
        return self._down_since is not None

    def failed(self, exc: BaseException) -> None:
        """An attempt failed because a dependency is away: warn once, count always."""
        self._failures.inc()
        self._failed_attempts += 1
        if self._down_since is None:
            self._down_since = self._clock()
            self._log.warning(
                "%s: dependency unavailable (%s: %s); retrying quietly until it is back",
                self._component,
                type(exc).__name__,
                exc,
            )
        else:
            self._log.debug("%s: still unavailable: %s", self._component, exc)

    def record(self, exc: Exception) -> None:
        """Sort a failed attempt: a retryable Fairlane error is the outage (quiet after the
        first warning); another Fairlane error is a warning of its own; anything else
        is unexpected and logged with its traceback."""
        if isinstance(exc, FairlaneError) and exc.retryable:
            self.failed(exc)
        elif isinstance(exc, FairlaneError):
            self._log.warning("%s: %s", self._component, exc)
        else:
            self._log.error("%s failed unexpectedly", self._component, exc_info=exc)

    def succeeded(self) -> None:
        """An attempt succeeded: if the dependency was away, say it is back, once."""
        if self._down_since is None:
            return
        self._log.warning(
            "%s: dependency back after %.1f s (%d failed attempts)",
            self._component,
            self._clock() - self._down_since,
            self._failed_attempts,
        )
        self._down_since, self._failed_attempts = None, 0
