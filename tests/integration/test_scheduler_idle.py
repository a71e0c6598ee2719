"""Idle holdings against real Kafka and Postgres (issue 29 item 3): a running placement
whose GPUs report near-idle activity for the window gets exactly one ``idle`` event on
``fairlane.placements.v1`` per idle episode, whatever the replicas, the metrics move,
and only in a namespace whose idle policy says so is its lease shortened (it then
expires like any lease)."""

from __future__ import annotations

import asyncio
import time

import asyncpg
import pytest

from fairlane_events.records import GpuScore, PlacementEvent
from fairlane_scheduler.settings import SchedulerSettings
from tests.integration import test_scheduler_learned_speed as learned_speed
from tests.integration.test_scheduler_api import wait_until
from tests.integration.test_scheduler_learned_speed import events_of
from tests.scheduler_harness import (
    gone_stale,
    node_scores,
    publish,
    running_scheduler,
    wait_for_node,
)

pytestmark = pytest.mark.integration

WINDOW_S = 1.0  # a short idle window; real time, as the scheduler's clock is


def settings_of(kafka_bootstrap: str, database_url: str) -> SchedulerSettings:
    """The learned-speed tests' scheduler, with a short idle window checked often."""
    base = learned_speed.settings_of(kafka_bootstrap, database_url)
    return base.model_copy(
        update={"expiry_interval_s": 0.1, "idle_window_s": WINDOW_S, "idle_check_s": 0.1}
    )


def scores(node: str, activity: float) -> list[GpuScore]:
    """Both GPUs of ``node``, held or not, with this activity, stamped now."""
    now = int(time.time() * 1000)
    gpus = [("NVIDIA B200", 0.95, 180), ("NVIDIA B200", 0.95, 180)]
    return node_scores(node, gpus, speed=6.0, ts_ms=now, activity=activity)


def kinds(events: list[PlacementEvent]) -> list[str]:
    return [e.event for e in events]


async def test_an_idle_placement_is_announced_once_per_episode_and_its_lease_kept(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    node = f"idle-{unique}"
    await publish(kafka_bootstrap, scores(node, 0.9))
    settings = settings_of(kafka_bootstrap, database_url)
    # Two replicas on one database: Postgres decides which announces.
    async with (
        running_scheduler(settings) as (client, app),
        running_scheduler(settings) as (_, other),
    ):
        for replica in (app, other):
            await wait_for_node(replica, node, gpus=2)
        job = {"job_id": "j", "gpus_per_node": 2, "models": ["B200"], "lease_s": 3600}
        placed = await client.post("/v1/placements", json=job)
        assert placed.status_code == 201, placed.text
        placement_id, lease_ms = placed.json()["id"], placed.json()["lease_expires_at_ms"]
        await publish(kafka_bootstrap, scores(node, 0.01))

        async def announced() -> bool:
            return "idle" in kinds(await events_of(kafka_bootstrap, placement_id))

        await wait_until(announced)
        await asyncio.sleep(1.0)  # ten more idle checks on each replica
        created, idle = await events_of(kafka_bootstrap, placement_id)
        assert (created.event, idle.event) == ("created", "idle")
        assert idle.nodes == created.nodes
        assert idle.idle_since_ms is not None
        assert idle.idle_since_ms >= created.ts_ms
        assert idle.lease_expires_ms is None  # no policy in this namespace
        counted = [r.state.runtime.metrics.idle_events._value.get() for r in (app, other)]
        assert sorted(counted) == [0, 1]
        metrics = (await client.get("/metrics")).text
        assert "fairlane_scheduler_idle_placements 1.0" in metrics
        got = await client.get(f"/v1/placements/{placement_id}")
        assert got.json()["lease_expires_at_ms"] == lease_ms  # nothing without the policy
        assert got.json()["state"] == "placed"
        # Busy again: the episode ends; idle again for a window: announced anew.
        await publish(kafka_bootstrap, scores(node, 0.6))

        async def episode_over() -> bool:
            return "fairlane_scheduler_idle_placements 0.0" in (await client.get("/metrics")).text

        await wait_until(episode_over)
        await publish(kafka_bootstrap, scores(node, 0.0))

        async def again() -> bool:
            return kinds(await events_of(kafka_bootstrap, placement_id)).count("idle") == 2

        await wait_until(again)
        await asyncio.sleep(0.5)
        assert kinds(await events_of(kafka_bootstrap, placement_id)) == ["created", "idle", "idle"]
        await client.delete(f"/v1/placements/{placement_id}")
    await publish(kafka_bootstrap, gone_stale(scores(node, 0.0)))


async def test_the_namespace_policy_shortens_an_idle_placements_lease(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    node, namespace = f"idlp-{unique}", f"team-{unique}"
    await publish(kafka_bootstrap, scores(node, 0.9))
    async with running_scheduler(settings_of(kafka_bootstrap, database_url)) as (client, app):
        await wait_for_node(app, node, gpus=2)
        policy = await client.put(f"/v1/idle-policies/{namespace}", json={"idle_lease_s": 3})
        assert policy.status_code == 200, policy.text
        assert policy.json() == {"namespace": namespace, "idle_lease_s": 3.0}
        bad = await client.put(f"/v1/idle-policies/{namespace}", json={"idle_lease_s": 0})
        assert bad.status_code == 422
        assert "idle_lease_s" in bad.text
        job = {
            "job_id": "j",
            "namespace": namespace,
            "gpus_per_node": 2,
            "models": ["B200"],
            "lease_s": 3600,
        }
        placed = await client.post("/v1/placements", json=job)
        assert placed.status_code == 201, placed.text
        placement_id = placed.json()["id"]
        await publish(kafka_bootstrap, scores(node, 0.0))

        async def announced() -> bool:
            return "idle" in kinds(await events_of(kafka_bootstrap, placement_id))

        await wait_until(announced)
        # A renewal cannot move the lease past what the policy set after the warning.
        renewed = await client.post(f"/v1/placements/{placement_id}/renew", json={"lease_s": 3600})
        assert renewed.status_code == 200, renewed.text
        capped = renewed.json()["lease_expires_at_ms"]
        assert capped <= int(time.time() * 1000) + 3000

        async def expired() -> bool:
            got = await client.get(f"/v1/placements/{placement_id}")
            published = kinds(await events_of(kafka_bootstrap, placement_id))
            return bool(got.json()["state"] == "expired" and "expired" in published)

        await wait_until(expired)
        events = await events_of(kafka_bootstrap, placement_id)
        assert kinds(events) == ["created", "idle", "expired"]
        idle = events[1]
        assert idle.lease_expires_ms is not None
        assert idle.lease_expires_ms - idle.ts_ms == pytest.approx(3000, abs=1)
        assert capped == pytest.approx(idle.lease_expires_ms, abs=1)
        assert events[2].ts_ms >= idle.lease_expires_ms
        # The policy is removed like it was set; the episode's row went with the lease.
        cleared = await client.put(f"/v1/idle-policies/{namespace}", json={"idle_lease_s": None})
        assert cleared.json()["idle_lease_s"] is None
    conn = await asyncpg.connect(database_url)
    try:
        assert (
            await conn.fetchval(
                "SELECT count(*) FROM idle_policies WHERE namespace = $1", namespace
            )
            == 0
        )
    finally:
        await conn.close()
    await publish(kafka_bootstrap, gone_stale(scores(node, 0.0)))
