"""``create_app(settings)``: the scheduler's composition root. Nothing connects at import."""

from __future__ import annotations

import asyncio
import contextlib
import gc
import logging
import ssl
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import asyncpg
from fastapi import FastAPI
from fastapi.telemetry import TelemetryConfig
from prometheus_client import CollectorRegistry
from starlette.routing import Route

from fairlane_runtime.kafka import ensure_topics
from fairlane_runtime.kafka_security import KafkaSecurity
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.adapters.dashboard_feed import DashboardFeed
from fairlane_scheduler.adapters.dead_letters import DeadLetterTally
from fairlane_scheduler.adapters.fleet_metrics import FleetCollector
from fairlane_scheduler.adapters.idle_store import PostgresIdleStore
from fairlane_scheduler.adapters.live_gpus import LiveGpusCache
from fairlane_scheduler.adapters.migrations import apply_migrations, load_migrations
from fairlane_scheduler.adapters.outbox import OutboxRelay
from fairlane_scheduler.adapters.pg_pool import connect_pool
from fairlane_scheduler.adapters.pg_tls import client_ssl
from fairlane_scheduler.adapters.scores import (
    FollowerCollector,
    ScoresFollower,
    SpeedsFollower,
    TopicFollower,
)
from fairlane_scheduler.adapters.store import PostgresStore
from fairlane_scheduler.api import dashboard, extender, idle_routes
from fairlane_scheduler.api.auth import TokenTable
from fairlane_scheduler.api.bodies import BodyLimits, BoundedBodies
from fairlane_scheduler.api.deps import MetricsPage, Runtime, SchedulerMetrics
from fairlane_scheduler.api.errors import install_error_handlers
from fairlane_scheduler.api.hot_routes import HotRoutes
from fairlane_scheduler.api.listeners import ExtenderPortGate
from fairlane_scheduler.api.routes import router
from fairlane_scheduler.clock import now_ms
from fairlane_scheduler.core.degraded import DegradedPolicy
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.idle import IdlePolicy, IdleTracker
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.degraded_watch import DegradedWatch
from fairlane_scheduler.heap import freeze_after_catch_up, thaw
from fairlane_scheduler.idle_watch import IdleWatch
from fairlane_scheduler.kube.wiring import with_kube_edges
from fairlane_scheduler.service import PlacementService
from fairlane_scheduler.settings import SchedulerSettings

__all__ = ["create_app", "database_ssl", "housekeeping"]

log = logging.getLogger("fairlane.scheduler")


async def housekeeping(
    service: PlacementService,
    interval_s: float,
    outage: OutageLog,
    observe: Callable[[], Awaitable[None]] | None = None,
) -> None:
    """Every interval: expire placements whose lease ended, then place what waits and
    now fits, then ``observe`` (the backlog gauges). Safe on every replica: Postgres
    decides who wins. While Postgres is away each round fails; ``outage`` logs that
    twice (gone, back), not every round."""
    while True:
        try:
            for placement in await service.expire_due():
                log.info("placement %s (job %s) expired", placement.id, placement.job_id)
            for placement in await service.place_pending():
                log.info("pending placement %s (job %s) placed", placement.id, placement.job_id)
            if observe is not None:
                await observe()
        except Exception as exc:  # noqa: BLE001 - sorted by OutageLog.record; loop goes on
            outage.record(exc)
        else:
            outage.succeeded()
        await asyncio.sleep(interval_s)


def database_ssl(settings: SchedulerSettings) -> ssl.SSLContext | str | None:
    """The ``ssl`` argument for every pool the scheduler opens, from its settings."""
    return client_ssl(
        settings.database_sslmode,
        rootcert=settings.database_sslrootcert,
        cert=settings.database_sslcert,
        key=settings.database_sslkey,
    )


_DASHBOARD_LIST_LIMIT = 200  # placements and queue entries a dashboard lists
_NO_TELEMETRY: TelemetryConfig = {"tracing": False, "metrics": False, "logs": False}


async def _start_dashboard(
    runtime: Runtime,
    speeds: SpeedsFollower,
    idle: IdleWatch,
    bootstrap: str,
    security: KafkaSecurity,
) -> tuple[DashboardFeed, DeadLetterTally]:
    """The dashboard's frames, drawn from what the API answers from (idle placements
    marked, shared GPUs' tenants from the placement service's ledger), and the tally of
    dead letters it shows."""
    dead_letters = DeadLetterTally(bootstrap, security=security)
    await dead_letters.start()
    follower, service, live_gpus = runtime.follower, runtime.service, runtime.live_gpus

    async def lists() -> tuple[Sequence[Placement], Sequence[Placement]]:
        placed = await service.page(None, "placed", _DASHBOARD_LIST_LIMIT, None)
        return placed, await service.queue(_DASHBOARD_LIST_LIMIT)

    feed = DashboardFeed(
        fleet=runtime.fleet,
        allocated=lambda: live_gpus.current,
        policy=runtime.policy,
        lists=lists,
        counters=lambda: {
            "score records the scheduler rejected": follower.rejected,
            "score tombstones (deletes) read": follower.deleted,
            "learned speed records the scheduler rejected": speeds.rejected,
            **dead_letters.as_counters(),
        },
        clock_ms=now_ms,
        outage=runtime.metrics.outage("dashboard", "postgres"),
        idle=lambda: idle.idle,
        shares=service.ledger,
    )
    await feed.start()
    return feed, dead_letters


def _observer(
    service: PlacementService, metrics: SchedulerMetrics, watch: DegradedWatch, idle: IdleWatch
) -> Callable[[], Awaitable[None]]:
    """Each housekeeping round's last steps: the backlog gauges, then running
    placements' slow GPUs announced, then (when due) idle ones."""

    async def observe() -> None:
        outbox, pending = await service.backlog()
        metrics.outbox_backlog.set(outbox)
        metrics.pending.set(pending)
        await watch.check()
        await idle.check()
        metrics.idle_placements.set(len(idle.idle))

    return observe


def _degraded_watch(
    settings: SchedulerSettings, store: PostgresStore, fleet: FleetView, metrics: SchedulerMetrics
) -> DegradedWatch:
    return DegradedWatch(
        store=store,
        fleet=fleet,
        policy=DegradedPolicy(settings.degraded_speed, settings.threshold, settings.stale_after_s),
        clock_ms=now_ms,
        announced=lambda gpu: metrics.degraded.labels(gpu.source).inc(),
    )


def _idle_watch(
    settings: SchedulerSettings, pool: asyncpg.Pool, fleet: FleetView, metrics: SchedulerMetrics
) -> IdleWatch:
    """The idle holdings' watch, with the tracker the scores follower feeds."""
    policy = IdlePolicy(settings.idle_threshold, settings.idle_window_s, settings.stale_after_s)
    return IdleWatch(
        store=PostgresIdleStore(pool),
        tracker=IdleTracker(policy),
        fleet=fleet,
        clock_ms=now_ms,
        check_s=settings.idle_check_s,
        announced=lambda _: metrics.idle_events.inc(),
    )


async def _migrate(pool: asyncpg.Pool) -> None:
    async with pool.acquire() as conn:
        applied = await apply_migrations(conn, load_migrations())
    if applied:
        log.info("applied migrations: %s", ", ".join(applied))


async def _start_relay(
    pool: asyncpg.Pool, bootstrap: str, metrics: SchedulerMetrics, security: KafkaSecurity
) -> OutboxRelay:
    relay = OutboxRelay(
        pool,
        bootstrap,
        postgres_outage=metrics.outage("outbox relay", "postgres"),
        kafka_outage=metrics.outage("outbox relay", "kafka"),
        security=security,
    )
    await relay.start()
    return relay


async def _start_followers(
    settings: SchedulerSettings,
    fleet: FleetView,
    idle: IdleTracker,
    kafka: KafkaSecurity,
    registry: CollectorRegistry,
) -> FollowerCollector:
    """The scores and learned speeds read into ``fleet`` (and ``idle``), counted in
    ``registry``."""
    bootstrap = settings.kafka_bootstrap_servers
    followed = FollowerCollector(
        ScoresFollower(bootstrap, fleet, idle=idle, security=kafka),
        SpeedsFollower(bootstrap, fleet, security=kafka),
    )
    for follower in followed.followers:
        await follower.start()
    registry.register(followed)
    return followed


async def _stop_followers(followed: FollowerCollector, registry: CollectorRegistry) -> None:
    registry.unregister(followed)
    for follower in followed.followers:
        await follower.stop()


def _readiness(
    followers: Sequence[TopicFollower[Any]],
    fleet: FleetView,
    policy: PlacementPolicy,
    fresh: Callable[[], int],
) -> Callable[[], bool]:
    """Whether placements can be decided: the scores and learned speeds caught up and
    some GPU is fresh.
    While ready, counted again at most once a second (a count over a 100k-GPU fleet on
    every request costs more than the decision); the filter still drops stale GPUs."""
    ready_until_ms = 0

    def is_ready() -> bool:
        nonlocal ready_until_ms
        if (now := now_ms()) < ready_until_ms:
            return True
        ready = all(f.caught_up for f in followers) and (
            fresh() > 0 or (policy.stale == "last_known" and len(fleet) > 0)
        )
        ready_until_ms = now + 1000 if ready else 0
        return ready

    return is_ready


def placement_policy(settings: SchedulerSettings) -> PlacementPolicy:
    return PlacementPolicy(
        settings.threshold,
        settings.stale_after_s,
        stale=settings.stale_policy,
        below_threshold=settings.below_threshold,
        capacity_resolution=settings.capacity_resolution,
        speed_resolution=settings.speed_resolution,
        share=settings.replica_share(),
    )


def create_app(settings: SchedulerSettings) -> FastAPI:
    metrics = SchedulerMetrics.create()
    kafka = settings.kafka_security()

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        await ensure_topics(settings.kafka_bootstrap_servers, security=kafka)
        pool = await connect_pool(
            settings.database_url.get_secret_value(),
            max_size=settings.db_pool_max,
            ssl=database_ssl(settings),
        )
        try:
            await _migrate(pool)
            fleet = FleetView(StabilityPolicy(settings.threshold, settings.stabilization_s))
            app.state.idle = idle = _idle_watch(settings, pool, fleet, metrics)
            followed = await _start_followers(
                settings, fleet, idle.tracker, kafka, metrics.registry
            )
            store = PostgresStore(pool)

            def fresh_gpus() -> int:
                return fleet.fresh_count(now_ms(), settings.stale_after_s)

            policy = placement_policy(settings)
            service = PlacementService(
                store=store,
                fleet=fleet,
                policy=policy,
                ports=PortRange(settings.master_port_first, settings.master_port_last),
                clock_ms=now_ms,
                is_fleet_ready=_readiness(followed.followers, fleet, policy, fresh_gpus),
                batch_max=settings.group_commit_max,
                summaries_from_nodes=settings.summaries_from_nodes,
                sharing_rule=settings.sharing_rule,
            )
            live_gpus = LiveGpusCache(
                service.resync,
                lambda: service.allocated,
                metrics.outage("allocation cache", "postgres"),
            )
            await live_gpus.start()
            metrics.conflicts.set_function(lambda: service.conflicts)
            app.state.runtime = runtime = Runtime(
                service, fleet, followed.scores, metrics, fresh_gpus, policy, live_gpus
            )
            feed, dead_letters = await _start_dashboard(
                runtime, followed.speeds, idle, settings.kafka_bootstrap_servers, kafka
            )
            app.state.dashboard = feed
            relay = await _start_relay(pool, settings.kafka_bootstrap_servers, metrics, kafka)
            metrics.registry.register(
                collector := FleetCollector(fleet, lambda: live_gpus.current, policy, relay, now_ms)
            )
            expiry = asyncio.create_task(
                housekeeping(
                    service,
                    settings.expiry_interval_s,
                    metrics.outage("housekeeping", "postgres"),
                    _observer(
                        service, metrics, _degraded_watch(settings, store, fleet, metrics), idle
                    ),
                ),
                name="housekeeping",
            )
            background, thresholds = [expiry], gc.get_threshold()
            if settings.gc_freeze:
                freeze = freeze_after_catch_up(
                    followed.scores.caught_up_event, settings.gc_gen0_threshold
                )
                background.append(asyncio.create_task(freeze, name="gc-freeze"))
            try:
                yield
            finally:
                for task in background:
                    task.cancel()
                    with contextlib.suppress(asyncio.CancelledError):
                        await task
                if settings.gc_freeze:
                    thaw(thresholds)
                metrics.registry.unregister(collector)
                await relay.stop()
                await feed.stop()
                await dead_letters.stop()
                await live_gpus.stop()
                await _stop_followers(followed, metrics.registry)
        finally:
            await pool.close()

    app = FastAPI(
        title="Fairlane scheduler",
        version="0.1.0",
        description="Places GPU jobs on the GPUs that will run them fastest, from live scores.",
        lifespan=with_kube_edges(lifespan, settings, metrics),
        # FastAPI's native OpenTelemetry looks up the global tracer, meter and logger
        # providers on every request (3-9 us, twice a placement's place + release); the
        # scheduler exports Prometheus metrics and sets no OpenTelemetry provider.
        telemetry=_NO_TELEMETRY,
    )
    app.state.tokens = TokenTable(settings)
    if settings.auth_disabled:
        log.warning("AUTHENTICATION IS DISABLED: every caller acts as the admin")
    _routes(app, settings, metrics)
    return app


def _routes(app: FastAPI, settings: SchedulerSettings, metrics: SchedulerMetrics) -> None:
    install_error_handlers(app)
    app.include_router(router)
    app.include_router(extender.router)
    app.include_router(idle_routes.router)
    app.include_router(dashboard.router)
    page = MetricsPage(metrics.registry)
    for path in ("/metrics", "/metrics/"):  # /metrics/: the scrape configs of before
        app.router.routes.append(Route(path, page, methods=["GET"], include_in_schema=False))
    app.add_middleware(HotRoutes)  # inside the port gate: added first
    if settings.extender_port is not None:
        app.add_middleware(ExtenderPortGate, extender_port=settings.extender_port)
    limits = BodyLimits(
        settings.max_body_bytes, settings.extender_max_body_bytes, settings.body_timeout_s
    )
    app.add_middleware(BoundedBodies, limits=limits)  # outermost: before anything reads
