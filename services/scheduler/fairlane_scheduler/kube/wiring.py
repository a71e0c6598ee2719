"""The extender's state, and its Kubernetes edges when settings name an API server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

import asyncpg
from aiokafka import AIOKafkaProducer

from fairlane_events.codec import encode
from fairlane_events.records import PlacementEvent
from fairlane_events.topics import PLACEMENTS
from fairlane_scheduler.api.deps import SchedulerMetrics
from fairlane_scheduler.api.extender import ExtenderState
from fairlane_scheduler.clock import now_ms
from fairlane_scheduler.core.extender_shares import placed_shares, shared_free_per_node
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.ledger import Ledger
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.kube.client import KubeClient, KubeConfig
from fairlane_scheduler.kube.device_taints import TaintController
from fairlane_scheduler.kube.node_eligibility import EligibilityAnnotator
from fairlane_scheduler.kube.pods import PodWatch, bind_pod
from fairlane_scheduler.kube.share_placements import pod_share_placements, release_shares
from fairlane_scheduler.settings import SchedulerSettings

__all__ = ["kube_config", "kube_edges", "with_kube_edges"]


async def _producer(settings: SchedulerSettings) -> AIOKafkaProducer:
    producer = AIOKafkaProducer(
        bootstrap_servers=settings.kafka_bootstrap_servers,
        enable_idempotence=True,
        acks="all",
        **settings.kafka_security().aiokafka_kwargs(),
    )
    await producer.start()
    return producer


async def publish_placements(producer: AIOKafkaProducer, events: list[PlacementEvent]) -> None:
    """The placement events of DRA claims, keyed by placement id as the outbox does."""
    for event in events:
        await producer.send_and_wait(PLACEMENTS, encode(event), key=event.placement_id.encode())


def kube_config(settings: SchedulerSettings) -> KubeConfig | None:
    if settings.kube_api_url is None:
        return None
    if settings.kube_api_url == "in-cluster":
        return KubeConfig.in_cluster()
    assert settings.kube_token_file is not None  # the settings' validator says so
    return KubeConfig(settings.kube_api_url, settings.kube_token_file, settings.kube_ca_file)


def _shared_free(fleet: FleetView, ledger: Ledger) -> dict[str, int]:
    return shared_free_per_node(fleet, placed_shares(ledger))


def _catch_up(summaries: NodeSummaries, fleet: FleetView, policy: PlacementPolicy) -> None:
    summaries.refresh(fleet, policy, now_ms())


@contextlib.asynccontextmanager
async def kube_edges(
    settings: SchedulerSettings, app_state: Any, metrics: SchedulerMetrics
) -> AsyncIterator[ExtenderState]:
    """``app_state.extender`` for the extender's routes; with an API server, the pod
    watch keeps its ledger, its bind verb binds through the API, Nodes carry their count
    of eligible GPUs (kube-scheduler retries held-back pods when it changes), and (when
    enabled) the device-taint controller runs."""
    app_state.extender = state = ExtenderState(sharing_rule=settings.sharing_rule)
    runtime = app_state.runtime
    # The node summaries catch up after each batch of score records, so a filter
    # recomputes only what changed since (docs/benchmarks.md, Extender).
    runtime.follower.after_batch = partial(
        _catch_up, state.summaries, runtime.fleet, runtime.policy
    )
    config = kube_config(settings)
    if config is None:
        yield state
        return
    client = KubeClient(config)
    watch = PodWatch(
        client,
        state.ledger,
        metrics.outage("pod watch", "kubernetes"),
        flights=state.flights,
        release_shares=partial(release_shares, runtime.service),
        read_shares=partial(pod_share_placements, runtime.service),
    )
    await watch.start()
    state.binder = partial(bind_pod, client)
    eligibility = EligibilityAnnotator(
        client,
        fleet=runtime.fleet,
        summaries=state.summaries,
        ledger=state.ledger,
        policy=runtime.policy,
        shared_free=partial(_shared_free, runtime.fleet, runtime.service.ledger),
        clock_ms=now_ms,
        outage=metrics.outage("node eligibility annotations", "kubernetes"),
    )
    await eligibility.start()
    taints, producer = None, None
    if settings.kube_device_taints:
        from fairlane_scheduler.app import database_ssl

        taints = TaintController(
            client,
            partial(
                asyncpg.connect,
                settings.database_url.get_secret_value(),
                ssl=database_ssl(settings),
            ),
            fleet=runtime.fleet,
            policy=runtime.policy,
            clock_ms=now_ms,
            outage=metrics.outage("device taints", "kubernetes or postgres"),
            interval_s=settings.kube_device_taints_interval_s,
            publish=partial(publish_placements, producer := await _producer(settings)),
        )
        await taints.start()
    try:
        yield state
    finally:
        state.binder = None
        await eligibility.stop()
        if taints is not None:
            await taints.stop()
        if producer is not None:
            await producer.stop()
        await watch.stop()
        await client.close()


Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


def with_kube_edges(
    lifespan: Lifespan, settings: SchedulerSettings, metrics: SchedulerMetrics
) -> Lifespan:
    """``lifespan``, then the extender's edges inside it (started last, stopped first)."""

    @contextlib.asynccontextmanager
    async def wrapped(app: Any) -> AsyncIterator[None]:
        async with lifespan(app), kube_edges(settings, app.state, metrics):
            yield

    return wrapped
