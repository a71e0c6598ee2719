"""The agent's collection loop: sample every interval and hand the round to delivery."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from fairlane_agent.delivery import Delivery
from fairlane_agent.metrics import AgentMetrics
from fairlane_agent.sources import SampleSource

__all__ = ["run_collection"]

log = logging.getLogger("fairlane.agent")


async def run_collection(
    source: SampleSource,
    delivery: Delivery,
    interval_s: float,
    metrics: AgentMetrics,
    *,
    stop: asyncio.Event,
    clock: Callable[[], float] = time.time,
) -> None:
    """Collect a round every ``interval_s`` until ``stop`` is set.

    Sampling runs in a worker thread: NVML calls block, and a large simulated fleet
    takes a while; either way the sending loop keeps running meanwhile.
    """
    while not stop.is_set():
        started = time.monotonic()
        now_ms = int(clock() * 1000)
        samples = await asyncio.to_thread(source.sample, now_ms)
        metrics.samples_read.inc(len(samples))
        delivery.add(samples, now_ms)
        metrics.last_round_ts.set(clock())
        log.debug("collected %d node samples", len(samples))
        delay = max(0.0, interval_s - (time.monotonic() - started))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
