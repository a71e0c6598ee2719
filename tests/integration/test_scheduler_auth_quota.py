"""Tokens bound to namespaces, the admin token, and quotas, against real servers."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import httpx
import pytest
from pydantic import SecretStr

from fairlane_scheduler.settings import SchedulerSettings
from tests.integration.test_scheduler_api import publish_scores
from tests.scheduler_harness import running_scheduler, wait_for_node

pytestmark = pytest.mark.integration

ADMIN = {"Authorization": "Bearer admin-token"}
TEAM_A = {"Authorization": "Bearer token-a"}
TEAM_B = {"Authorization": "Bearer token-b"}


@pytest.fixture
async def client(
    kafka_bootstrap: str, database_url: str, unique: str
) -> AsyncIterator[httpx.AsyncClient]:
    node = f"auth-{unique}"  # H200: no other test publishes it
    await publish_scores(kafka_bootstrap, node, [0.9] * 8, model="NVIDIA H200")
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        admin_token=SecretStr("admin-token"),
        namespace_tokens={"team-a": SecretStr("token-a"), "team-b": SecretStr("token-b")},
    )
    async with running_scheduler(settings) as (http, app):
        await wait_for_node(app, node)
        yield http


def job(job_id: str, gpus: int = 1, **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "gpus_per_node": gpus, "models": ["H200"], **extra}


async def test_requests_without_a_valid_token_are_401(client: httpx.AsyncClient) -> None:
    for headers in ({}, {"Authorization": "Bearer nope"}, {"Authorization": "Basic x"}):
        answer = await client.post("/v1/placements", json=job("x"), headers=headers)
        assert answer.status_code == 401
        assert answer.headers["www-authenticate"] == "Bearer"
    assert (await client.get("/healthz")).status_code == 200


async def test_a_namespace_sees_and_releases_only_its_own(client: httpx.AsyncClient) -> None:
    mine = await client.post("/v1/placements", json=job("a1"), headers=TEAM_A)
    assert mine.status_code == 201, mine.text
    assert mine.json()["namespace"] == "team-a"  # the token's namespace by default
    pid = mine.json()["id"]
    assert (await client.get(f"/v1/placements/{pid}", headers=TEAM_B)).status_code == 404
    assert (await client.delete(f"/v1/placements/{pid}", headers=TEAM_B)).status_code == 404
    assert (await client.get(f"/v1/placements/{pid}", headers=TEAM_A)).json()["state"] == "placed"
    other = await client.post("/v1/placements", json=job("b1", namespace="team-a"), headers=TEAM_B)
    assert other.status_code == 403
    assert (
        await client.get("/v1/placements", params={"namespace": "team-a"}, headers=TEAM_B)
    ).status_code == 403
    assert (await client.get("/v1/placements", headers=TEAM_B)).json()["items"] == []
    listed = (await client.get("/v1/placements", headers=ADMIN)).json()["items"]
    assert [p["id"] for p in listed] == [pid]
    assert (await client.delete(f"/v1/placements/{pid}", headers=ADMIN)).json()[
        "state"
    ] == "released"


async def test_quotas_refuse_with_403_or_429_and_only_admins_set_them(
    client: httpx.AsyncClient,
) -> None:
    body = {"max_gpus": 3, "max_gpus_per_model": {"NVIDIA H200": 2}}
    assert (await client.put("/v1/quotas/team-a", json=body, headers=TEAM_A)).status_code == 403
    assert (await client.put("/v1/quotas/team-a", json=body, headers=ADMIN)).status_code == 200
    never = await client.post("/v1/placements", json=job("q0", gpus=3), headers=TEAM_A)
    assert never.status_code == 403, never.text  # 3 H200 can never fit a limit of 2
    first = await client.post("/v1/placements", json=job("q1", gpus=2), headers=TEAM_A)
    assert first.status_code == 201
    later = await client.post("/v1/placements", json=job("q2", gpus=1), headers=TEAM_A)
    assert later.status_code == 429, later.text  # no H200 left within the quota, for now
    assert later.headers["retry-after"]
    quota = (await client.get("/v1/quotas/team-a", headers=TEAM_A)).json()
    assert quota["used_gpus"] == 2
    assert quota["used_by_model"] == {"H200": 2}
    await client.delete(f"/v1/placements/{first.json()['id']}", headers=TEAM_A)
    assert (
        await client.post("/v1/placements", json=job("q2", gpus=1), headers=TEAM_A)
    ).status_code == 201
    # team-b has no quota row: no limit.
    assert (
        await client.post("/v1/placements", json=job("b", gpus=4), headers=TEAM_B)
    ).status_code == 201


async def test_admins_cordon_nodes_and_placements_avoid_them(
    client: httpx.AsyncClient, unique: str
) -> None:
    node = f"auth-{unique}"
    path = f"/v1/nodes/{node}/cordon"
    assert (await client.put(path, json={"reason": "x"}, headers=TEAM_A)).status_code == 403
    assert (
        await client.put(path, json={"reason": "fan failure"}, headers=ADMIN)
    ).status_code == 204
    # Other tests' H200 nodes may take these; the cordoned one never does.
    for i in range(3):
        answer = await client.post("/v1/placements", json=job(f"c{i}"), headers=TEAM_A)
        if answer.status_code == 201:
            assert answer.json()["nodes"][0]["node"] != node
        else:
            assert answer.json()["rejections"]["cordoned"] == 8
    detail = (await client.get(f"/v1/nodes/{node}", headers=TEAM_A)).json()
    assert {g["state"] for g in detail["gpus"]} == {"cordoned"}
    assert (await client.delete(path, headers=ADMIN)).status_code == 204
    detail = (await client.get(f"/v1/nodes/{node}", headers=TEAM_A)).json()
    assert {g["state"] for g in detail["gpus"]} == {"free"}
