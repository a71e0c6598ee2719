"""Getting samples to Kafka across broker outages.

Rounds go into a bounded :class:`~fairlane_agent.core.backlog.Backlog`; one sending
loop takes the oldest batch (at most one sample per node), sends it, and puts back
what failed. While Kafka is away the backlog grows (bounded, oldest dropped first);
when it returns the backlog drains in order. On shutdown what is left is sent until a
deadline; what still remains is counted as dropped.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Protocol

from aiokafka.errors import (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)

from fairlane_agent.core.backlog import Backlog, Drops
from fairlane_agent.metrics import AgentMetrics
from fairlane_events.records import NodeSample

__all__ = ["Delivery", "RecordSender", "is_refusal"]

log = logging.getLogger("fairlane.agent.delivery")

_MIN_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 5.0
_REFUSALS = (
    AuthenticationFailedError,
    ClusterAuthorizationFailedError,
    SaslAuthenticationFailed,
    TopicAuthorizationFailedError,
    TransactionalIdAuthorizationFailed,
)


class RecordSender(Protocol):
    async def send_batch(self, samples: list[NodeSample]) -> list[BaseException | None]:
        """Send every sample; the outcome of each, in order (None = acknowledged)."""
        ...


class Delivery:
    def __init__(
        self,
        backlog: Backlog,
        sender: RecordSender,
        metrics: AgentMetrics,
        *,
        max_batch: int = 5000,
        stall_s: float = 10.0,
    ) -> None:
        self._backlog = backlog
        self._sender = sender
        self._metrics = metrics
        self._max_batch = max_batch
        self._stall_s = stall_s
        self._wake = asyncio.Event()
        self._failing_since: float | None = None
        self.connected = True
        self.last_round_monotonic = time.monotonic()

    @property
    def pending(self) -> int:
        """Samples waiting for Kafka (not counting a batch in flight)."""
        return len(self._backlog)

    def add(self, samples: list[NodeSample], now_ms: int) -> None:
        """Queue a round for sending (never blocks, never fails)."""
        self.last_round_monotonic = time.monotonic()
        self._count_drops(self._backlog.add(samples, now_ms))
        self._metrics.buffered.set(len(self._backlog))
        self._wake.set()

    def _count_drops(self, drops: Drops) -> None:
        for reason, n in (("overflow", drops.overflow), ("expired", drops.expired)):
            if n:
                self._metrics.dropped.labels(reason).inc(n)
                log.warning("dropped %d samples (%s); backlog %d", n, reason, len(self._backlog))

    async def run(self, stop: asyncio.Event) -> None:
        """Send until ``stop`` is set; the caller then calls :meth:`flush`."""
        backoff = _MIN_BACKOFF_S
        while not stop.is_set():
            self._wake.clear()
            if not self._backlog:
                await _first_of(self._wake, stop)
                continue
            if await self._send_one_batch():
                backoff = _MIN_BACKOFF_S
            else:
                await _first_of(stop, timeout_s=backoff)
                backoff = min(_MAX_BACKOFF_S, backoff * 2)

    async def flush(self, deadline_s: float) -> None:
        """Send what is left within ``deadline_s``; count the rest as dropped."""
        end = time.monotonic() + deadline_s
        while self._backlog and (left := end - time.monotonic()) > 0:
            try:
                sent = await asyncio.wait_for(self._send_one_batch(), left)
            except TimeoutError:
                break
            if not sent:
                await asyncio.sleep(min(_MIN_BACKOFF_S, max(0.0, end - time.monotonic())))
        if self._backlog:
            self._metrics.dropped.labels("shutdown").inc(len(self._backlog))
            log.error("shutdown: %d samples not delivered", len(self._backlog))
        else:
            log.info("shutdown: backlog flushed")

    async def _send_one_batch(self) -> bool:
        """Send the oldest batch; True when all of it was acknowledged."""
        batch = self._backlog.take_batch(self._max_batch)
        started = time.monotonic()
        sending = asyncio.ensure_future(self._sender.send_batch(batch))
        try:
            # The producer retries a request in flight until the broker answers, without
            # duplicates (idempotence); so a stalled batch is waited for, never resent.
            if not (await asyncio.wait({sending}, timeout=self._stall_s))[0]:
                self._note_health(TimeoutError(f"no acknowledgement in {self._stall_s:.0f} s"))
            outcomes = await sending
        except BaseException:
            sending.cancel()
            self._backlog.put_back(batch)  # cancelled (shutdown) or broken: counted later
            raise
        self._metrics.publish_s.observe(time.monotonic() - started)
        failed = [s for s, error in zip(batch, outcomes, strict=True) if error is not None]
        self._metrics.kafka_refused.inc(sum(is_refusal(e) for e in outcomes))
        self._backlog.put_back(failed)
        self._metrics.published.inc(len(batch) - len(failed))
        self._metrics.buffered.set(len(self._backlog))
        self._note_health(next((e for e in outcomes if e is not None), None))
        return not failed

    def _note_health(self, error: BaseException | None) -> None:
        """Log an outage once when it starts and once when it ends."""
        if error is None and not self.connected:
            log.warning(
                "Kafka is back after %.0f s; backlog %d",
                time.monotonic() - (self._failing_since or time.monotonic()),
                len(self._backlog),
            )
            self.connected, self._failing_since = True, None
        elif error is not None and self.connected:
            if is_refusal(error):  # waiting will not help; say what to fix, once
                log.error(
                    "Kafka refused this principal (%s): check its ACLs and credentials; buffering",
                    type(error).__name__,
                )
            else:
                log.warning("Kafka unreachable (%s); buffering", type(error).__name__)
            self.connected, self._failing_since = False, time.monotonic()


def is_refusal(error: BaseException | None) -> bool:
    """Kafka answered, and said no: an ACL or authentication failure, not an outage."""
    return isinstance(error, _REFUSALS)


async def _first_of(*events: asyncio.Event, timeout_s: float | None = None) -> None:
    """Wait until any of ``events`` is set, or ``timeout_s`` passed."""
    waiters = [asyncio.ensure_future(e.wait()) for e in events]
    try:
        await asyncio.wait(waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for w in waiters:
            w.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await w
