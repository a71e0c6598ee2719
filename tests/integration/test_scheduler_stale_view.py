"""A replica's in-memory view of what is allocated only makes conflicts rare; Postgres
decides. Here one replica's view is made stale on purpose (it forgets what the other
replica holds, and stops refreshing): the database refuses its choice, and the request
retries on a resynchronised view instead of double-allocating."""

from __future__ import annotations

from contextlib import AsyncExitStack

import asyncpg
import pytest

from fairlane_scheduler.settings import SchedulerSettings
from tests.integration.test_scheduler_api import publish_scores
from tests.scheduler_harness import running_scheduler, wait_for_node

pytestmark = pytest.mark.integration

A100 = "NVIDIA A100-SXM4-40GB"  # no other test publishes it


async def test_a_stale_view_never_makes_postgres_accept_a_double_allocation(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    node = f"stale-{unique}"
    await publish_scores(kafka_bootstrap, node, [0.95, 0.95, 0.9, 0.9], model=A100)
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap, database_url=database_url, auth_disabled=True
    )
    async with AsyncExitStack() as stack:
        (a, app_a), (b, app_b) = [
            await stack.enter_async_context(running_scheduler(settings)) for _ in range(2)
        ]
        for app in (app_a, app_b):
            await wait_for_node(app, node, 4)
        stale = app_b.state.runtime
        await stale.live_gpus.stop()  # b hears of nothing but its own writes from now on

        def forget() -> None:  # b's view: every GPU free
            stale.service.ledger.replace([], [], stale.service.ledger.seq)

        body = {"gpus_per_node": 2, "models": ["A100-40GB"]}
        first = await a.post("/v1/placements", json={"job_id": f"first-{unique}", **body})
        assert first.status_code == 201, first.text
        forget()
        second = await b.post("/v1/placements", json={"job_id": f"second-{unique}", **body})
        assert second.status_code == 201, second.text  # after one refused attempt
        assert stale.service.conflicts == 1
        forget()
        third = await b.post("/v1/placements", json={"job_id": f"third-{unique}", **body})
        assert third.status_code == 409, third.text  # refused by Postgres, then no capacity
        assert third.json()["error"] == "no_capacity"
        assert stale.service.conflicts == 2

    def gpus(answer: dict[str, list[dict[str, list[dict[str, str]]]]]) -> set[str]:
        return {g["uuid"] for n in answer["nodes"] for g in n["gpus"]}

    assert gpus(first.json()).isdisjoint(gpus(second.json()))
    conn = await asyncpg.connect(database_url)
    try:
        live = await conn.fetch(
            "SELECT gpu_uuid, count(*) AS n FROM allocations WHERE live AND node = $1 "
            "GROUP BY gpu_uuid",
            node,
        )
        jobs = await conn.fetch(
            "SELECT job_id FROM placements WHERE job_id = ANY($1::text[])",
            [f"{j}-{unique}" for j in ("first", "second", "third")],
        )
    finally:
        await conn.close()
    assert sorted(r["n"] for r in live) == [1, 1, 1, 1]  # each GPU once
    assert sorted(r["job_id"] for r in jobs) == [
        f"first-{unique}",
        f"second-{unique}",
    ]  # nothing of the refused
