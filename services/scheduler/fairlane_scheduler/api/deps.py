"""What the routes depend on, wired once by ``create_app`` and held on ``app.state``."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, get_args

from fastapi import Depends, Request
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_asgi_app
from starlette.types import Receive, Scope, Send

from fairlane_events.records import SlowGpu
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.adapters.live_gpus import LiveGpusCache
from fairlane_scheduler.adapters.scores import ScoresFollower
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.service import PlacementService

__all__ = ["MetricsPage", "Runtime", "RuntimeDep", "SchedulerMetrics"]


@dataclass(frozen=True)
class SchedulerMetrics:
    registry: CollectorRegistry
    placements: Counter
    created: Counter  # placements{outcome="created"}, looked up once, not per request
    replayed: Counter  # placements{outcome="replayed"}
    rejected: Counter
    dependency_failures: Counter
    placement_s: Histogram
    outbox_backlog: Gauge
    pending: Gauge
    conflicts: Gauge
    degraded: Counter  # slow GPUs of running placements announced, by source
    idle_events: Counter  # idle placements this replica announced
    idle_placements: Gauge  # live placements in an announced idle episode

    @classmethod
    def create(cls) -> SchedulerMetrics:
        r = CollectorRegistry()
        placements = Counter(
            "fairlane_scheduler_placements", "placement answers", ["outcome"], registry=r
        )
        degraded = Counter(
            "fairlane_scheduler_degraded_gpus",
            "slow GPUs of running placements this replica announced in a degraded event",
            ["source"],
            registry=r,
        )
        for source in get_args(SlowGpu.model_fields["source"].annotation):
            degraded.labels(source)  # every series from the start: alerts see 0, not nothing
        return cls(
            registry=r,
            placements=placements,
            created=placements.labels("created"),
            replayed=placements.labels("replayed"),
            rejected=Counter(
                "fairlane_scheduler_no_capacity", "requests nothing could take", registry=r
            ),
            dependency_failures=Counter(
                "fairlane_scheduler_dependency_failures",
                "background attempts that failed because Postgres or Kafka was away",
                ["component", "dependency"],
                registry=r,
            ),
            placement_s=Histogram(
                "fairlane_scheduler_placement_seconds",
                "time to answer a placement request (POST /v1/placements)",
                buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5),
                registry=r,
            ),
            outbox_backlog=Gauge(
                "fairlane_scheduler_outbox_backlog",
                "outbox events not yet published to Kafka (read every housekeeping round)",
                registry=r,
            ),
            pending=Gauge(
                "fairlane_scheduler_pending_placements",
                "placements waiting in the queue (read every housekeeping round)",
                registry=r,
            ),
            conflicts=Gauge(
                "fairlane_scheduler_conflicts",
                "writes Postgres refused since start: a GPU or port another replica held "
                "first (each retried on a resynchronised view)",
                registry=r,
            ),
            degraded=degraded,
            idle_events=Counter(
                "fairlane_scheduler_idle_events",
                "running placements this replica announced in an idle event (all their "
                "GPUs near-idle for the idle window)",
                registry=r,
            ),
            idle_placements=Gauge(
                "fairlane_scheduler_idle_placements",
                "running placements in an announced idle episode, as Postgres records them "
                "(read every idle check)",
                registry=r,
            ),
        )

    def outage(self, component: str, dependency: str) -> OutageLog:
        """The outage log of ``component``'s ``dependency``, counting into /metrics."""
        logger = logging.getLogger("fairlane.scheduler.outage")
        failures = self.dependency_failures.labels(component, dependency)
        return OutageLog(logger, f"{component} ({dependency})", failures)


class MetricsPage:
    """The registry as Prometheus scrapes it (prometheus_client's ASGI app: the text or
    OpenMetrics format, gzip when asked), as an endpoint of its own: a class, so that a
    Starlette ``Route`` serves it as ASGI at exactly its path (mounted, ``GET /metrics``
    was answered with a 307 to ``/metrics/``)."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._app = make_asgi_app(registry)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self._app(scope, receive, send)


@dataclass(frozen=True)
class Runtime:
    service: PlacementService
    fleet: FleetView
    follower: ScoresFollower
    metrics: SchedulerMetrics
    fresh_gpus: Callable[[], int]  # fresh GPUs in the fleet view now
    policy: PlacementPolicy
    live_gpus: LiveGpusCache


async def _runtime(request: Request) -> Runtime:  # async: no worker thread per request
    runtime: Runtime = request.app.state.runtime
    return runtime


RuntimeDep = Annotated[Runtime, Depends(_runtime)]
