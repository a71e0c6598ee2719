"""The agent's loop: sample the fleet every interval and publish the round."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry, Counter, Histogram

from fairlane_agent.publisher import SamplePublisher
from fairlane_sim.fleet import FleetSimulator

__all__ = ["AgentMetrics", "run_agent"]

log = logging.getLogger("fairlane.agent")


@dataclass(frozen=True)
class AgentMetrics:
    registry: CollectorRegistry
    published: Counter
    publish_s: Histogram

    @classmethod
    def create(cls) -> AgentMetrics:
        r = CollectorRegistry()
        return cls(
            registry=r,
            published=Counter("fairlane_agent_samples_published", "node samples", registry=r),
            publish_s=Histogram("fairlane_agent_publish_seconds", "round latency", registry=r),
        )


async def run_agent(
    fleet: FleetSimulator,
    publisher: SamplePublisher,
    interval_s: float,
    metrics: AgentMetrics,
    stop: asyncio.Event,
) -> None:
    """Publish a round at every interval boundary until ``stop`` is set."""
    while not stop.is_set():
        started = time.monotonic()
        samples = fleet.sample(int(time.time() * 1000))
        with metrics.publish_s.time():
            await publisher.publish(samples)
        metrics.published.inc(len(samples))
        log.debug("published %d node samples", len(samples))
        delay = max(0.0, interval_s - (time.monotonic() - started))
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), delay)
