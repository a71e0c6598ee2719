"""The extender's state, and its Kubernetes edges when settings name an API server."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from functools import partial
from typing import Any

from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.api.extender import ExtenderState
from fairlane_scheduler.kube.client import KubeClient, KubeConfig
from fairlane_scheduler.kube.pods import PodWatch, bind_pod
from fairlane_scheduler.settings import SchedulerSettings

__all__ = ["kube_config", "kube_edges", "with_kube_edges"]


def kube_config(settings: SchedulerSettings) -> KubeConfig | None:
    if settings.kube_api_url is None:
        return None
    if settings.kube_api_url == "in-cluster":
        return KubeConfig.in_cluster()
    if settings.kube_token_file is None:
        raise ValueError("kube_token_file is required with kube_api_url (or use in-cluster)")
    return KubeConfig(settings.kube_api_url, settings.kube_token_file, settings.kube_ca_file)


@contextlib.asynccontextmanager
async def kube_edges(
    settings: SchedulerSettings, app_state: Any, outage: OutageLog
) -> AsyncIterator[ExtenderState]:
    """``app_state.extender`` for the extender's routes; with an API server, the pod
    watch keeps its ledger and its bind verb binds through the API."""
    app_state.extender = state = ExtenderState()
    config = kube_config(settings)
    if config is None:
        yield state
        return
    client = KubeClient(config)
    watch = PodWatch(client, state.ledger, outage)
    await watch.start()
    state.binder = partial(bind_pod, client)
    try:
        yield state
    finally:
        state.binder = None
        await watch.stop()
        await client.close()


Lifespan = Callable[[Any], AbstractAsyncContextManager[None]]


def with_kube_edges(lifespan: Lifespan, settings: SchedulerSettings, outage: OutageLog) -> Lifespan:
    """``lifespan``, then the extender's edges inside it (started last, stopped first)."""

    @contextlib.asynccontextmanager
    async def wrapped(app: Any) -> AsyncIterator[None]:
        async with lifespan(app), kube_edges(settings, app.state, outage):
            yield

    return wrapped
