"""The clients send the namespace's bearer token: the scheduler (in this process, real
Postgres and Kafka, reached through httpx's ASGI transport) places in the token's
namespace, and answers a wrong token with 401, which the client raises as such."""

from __future__ import annotations

import time

import httpx
import pytest
from pydantic import SecretStr

from fairlane.client import AsyncClient
from fairlane.errors import ApiError
from fairlane.models import PlacementRequest
from fairlane_scheduler.settings import SchedulerSettings
from tests.scheduler_harness import (
    gone_stale,
    node_scores,
    publish,
    running_scheduler,
    wait_for_node,
)

pytestmark = pytest.mark.integration

MEMORY_GIB = 4001.0  # no other test's GPUs have as much: the job lands on this test's node


async def test_the_token_places_in_its_namespace_and_a_wrong_one_is_refused(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    node = f"client-auth-{unique}"
    gpus = [("NVIDIA B200", 0.95, MEMORY_GIB)]
    scores = node_scores(node, gpus, speed=6.0, ts_ms=int(time.time() * 1000))
    await publish(kafka_bootstrap, scores)
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        namespace_tokens={"team-a": SecretStr("token-a")},
    )
    request = PlacementRequest(job_id="j1", gpus_per_node=1, min_gpu_memory_gib=MEMORY_GIB)
    async with running_scheduler(settings) as (_, app):
        await wait_for_node(app, node)
        transport = httpx.ASGITransport(app=app)
        async with AsyncClient("http://t", "token-a", transport=transport) as api:
            placement = await api.place(request)
            assert (placement.namespace, placement.nodes[0].node) == ("team-a", node)
            async with AsyncClient("http://t", "token-b", transport=transport) as intruder:
                with pytest.raises(ApiError) as refused:
                    await intruder.get(placement.id)
            assert (refused.value.status, refused.value.code) == (401, "unauthorized")
            assert (await api.release(placement.id)).state == "released"
    await publish(kafka_bootstrap, gone_stale(scores))
