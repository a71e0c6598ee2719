"""Fractional placements through the running scheduler (issue 29), on real Kafka and
Postgres: shares of one GPU pack together, whole jobs keep off shared GPUs, the answer
and the placement events carry each share and its environment."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest

from tests.integration.test_scheduler_api import api, placement_events, scheduler_with_node
from tests.integration.test_scheduler_api import job as any_job

pytestmark = pytest.mark.integration

__all__ = ["api"]  # the fixture, used by name


@pytest.fixture
async def own_model(
    kafka_bootstrap: str, database_url: str, unique: str
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A scheduler and a node of a model no test before this one publishes (the API
    knows only catalogue models): the session's B200 nodes may still be fresh, and a
    whole job of three must find no other node. The node goes stale at the end (the
    summaries test places on K80s later)."""
    model = "Tesla K80"
    node = f"frac-{unique}"
    async with scheduler_with_node(kafka_bootstrap, database_url, node, model) as (client, _):
        yield client, model


async def test_shares_pack_on_one_gpu_and_their_events_carry_them(
    own_model: tuple[httpx.AsyncClient, str], kafka_bootstrap: str
) -> None:
    client, model = own_model

    def job(job_id: str, gpus: int, **extra: Any) -> dict[str, Any]:
        return any_job(job_id, gpus, models=[model], **extra)

    first = await client.post("/v1/placements", json=job("s1", gpus=1, gpu_share=0.5))
    assert first.status_code == 201, first.text
    (node,) = first.json()["nodes"]
    (slot,) = node["gpus"]
    assert slot["share"] == 0.5
    assert node["env"]["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "50"
    assert node["env"]["FAIRLANE_GPU_MEMORY_MIB"] == str(slot["memory_mib"])
    body = job("s2", gpus=1, gpu_share=0.5, gpu_memory_mib=1024)
    second = await client.post("/v1/placements", json=body)
    assert second.status_code == 201, second.text
    assert second.json()["nodes"][0]["gpus"][0] == {**slot, "share": 0.5, "memory_mib": 1024}
    # Three GPUs qualify and one is full of shares: a whole job of three cannot fit.
    whole = await client.post("/v1/placements", json=job("w", gpus=3))
    assert whole.status_code == 409, whole.text
    assert whole.json()["rejections"]["allocated"] == 1
    (created,) = await placement_events(kafka_bootstrap, first.json()["id"], 1)
    assert (created.nodes[0].gpus[0].share, created.nodes[0].env) == (0.5, node["env"])
    for placed in (first, second):
        assert (await client.delete(f"/v1/placements/{placed.json()['id']}")).status_code == 200
    assert (await client.post("/v1/placements", json=job("w", gpus=3))).status_code == 201


async def test_a_share_of_more_than_one_gpu_is_a_422_naming_the_field(
    api: tuple[httpx.AsyncClient, str],
) -> None:
    client, _ = api
    answer = await client.post("/v1/placements", json=any_job("x", gpus=2, gpu_share=0.5))
    assert answer.status_code == 422
    assert [e["loc"] for e in answer.json()["detail"]] == [["body", "gpus_per_node"]]
