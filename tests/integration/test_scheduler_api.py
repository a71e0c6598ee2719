"""The scheduler's API against real Postgres and Kafka: lifecycle, leases, the outbox.

Scores are produced straight onto the scores topic for B200 GPUs of a node unique to
the test, and requests ask for B200, so nothing else on the shared topic interferes.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import time
from collections.abc import AsyncIterator, Callable
from typing import Any

import httpx
import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRecord, TopicPartition

from fairlane_events.codec import decode
from fairlane_events.records import GpuScore, PlacementEvent
from fairlane_events.topics import GPU_SCORES, PLACEMENTS, STREAM_PARTITIONS
from fairlane_scheduler.adapters.scores import ScoresFollower
from fairlane_scheduler.core.node_states import FREE
from fairlane_scheduler.settings import SchedulerSettings
from tests.scheduler_harness import (
    gone_stale,
    node_scores,
    publish,
    running_scheduler,
    wait_for_node,
)

pytestmark = pytest.mark.integration


async def publish_scores(
    bootstrap: str, node: str, scores: list[float], model: str = "NVIDIA B200"
) -> list[GpuScore]:
    """``node``'s GPUs of ``model`` with these scores, fresh: what was published."""
    now = int(time.time() * 1000)
    records = node_scores(node, [(model, s, 180) for s in scores], speed=6.0, ts_ms=now)
    await publish(bootstrap, records)
    return records


@contextlib.asynccontextmanager
async def scheduler_with_node(
    kafka_bootstrap: str, database_url: str, node: str, model: str = "NVIDIA B200"
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    """A running scheduler that knows ``node``'s four GPUs of ``model`` (scores 0.95,
    0.9, 0.85, 0.5); they go stale when it stops, so that later tests never place there."""
    records = await publish_scores(kafka_bootstrap, node, [0.95, 0.9, 0.85, 0.5], model=model)
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        expiry_interval_s=0.2,
        auth_disabled=True,
    )
    try:
        async with running_scheduler(settings) as (client, app):
            await wait_for_node(app, node)
            yield client, node
    finally:
        await publish(kafka_bootstrap, gone_stale(records))


@pytest.fixture
async def api(
    kafka_bootstrap: str, database_url: str, unique: str
) -> AsyncIterator[tuple[httpx.AsyncClient, str]]:
    async with scheduler_with_node(kafka_bootstrap, database_url, f"api-{unique}") as api:
        yield api


def job(job_id: str, gpus: int = 2, **extra: Any) -> dict[str, Any]:
    return {"job_id": job_id, "gpus_per_node": gpus, "models": ["B200"], **extra}


async def wait_until(check: Callable[[], Any], timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while not await check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.2)


async def wait_for_gpus(client: httpx.AsyncClient, node: str, gpus: int) -> None:
    """Until the scheduler holds the scores of all ``gpus`` GPUs of ``node``."""

    async def known() -> bool:
        answer = await client.get(f"/v1/nodes/{node}")
        return answer.status_code == 200 and len(answer.json()["gpus"]) >= gpus

    await wait_until(known)


async def placement_records(
    bootstrap: str, placement_id: str, count: int
) -> list[ConsumerRecord[bytes, bytes]]:
    """The first ``count`` records of one placement on the placements topic, in order."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    found: list[ConsumerRecord[bytes, bytes]] = []
    try:
        parts = [TopicPartition(PLACEMENTS, p) for p in range(STREAM_PARTITIONS)]
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        deadline = time.monotonic() + 30
        while len(found) < count and time.monotonic() < deadline:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                found += [r for r in records if r.key == placement_id.encode()]
    finally:
        await consumer.stop()
    return found


async def placement_events(bootstrap: str, placement_id: str, count: int) -> list[PlacementEvent]:
    """The first ``count`` events of one placement on the placements topic, in order."""
    records = await placement_records(bootstrap, placement_id, count)
    return [decode(PlacementEvent, r.value) for r in records]


async def test_release_frees_gpus_and_publishes_events_in_order(
    api: tuple[httpx.AsyncClient, str], kafka_bootstrap: str
) -> None:
    client, _ = api
    first = await client.post("/v1/placements", json=job("a", gpus=3))
    assert first.status_code == 201, first.text
    # Only 3 GPUs of the node qualify (one scores 0.5): a second job cannot fit...
    blocked = await client.post("/v1/placements", json=job("b", gpus=1))
    assert blocked.status_code == 409
    assert blocked.json()["rejections"]["allocated"] == 3
    released = await client.delete(f"/v1/placements/{first.json()['id']}")
    assert released.status_code == 200
    assert released.json()["state"] == "released"
    assert released.json()["ended_at_ms"] is not None
    # ...until the first is released. Releasing again changes nothing.
    assert (await client.post("/v1/placements", json=job("b", gpus=1))).status_code == 201
    again = await client.delete(f"/v1/placements/{first.json()['id']}")
    assert again.json() == released.json()
    events = await placement_events(kafka_bootstrap, first.json()["id"], 2)
    assert [e.event for e in events] == ["created", "released"]
    assert [g.uuid for g in events[0].nodes[0].gpus] == [
        g["uuid"] for g in first.json()["nodes"][0]["gpus"]
    ]


async def test_unrenewed_lease_expires_and_renewal_keeps_it(
    api: tuple[httpx.AsyncClient, str], kafka_bootstrap: str
) -> None:
    client, _ = api
    short = (await client.post("/v1/placements", json=job("short", gpus=1, lease_s=1))).json()
    kept = (await client.post("/v1/placements", json=job("kept", gpus=1, lease_s=1))).json()
    assert short["lease_expires_at_ms"] - short["created_at_ms"] == 1000

    async def short_expired() -> bool:
        answer = await client.get(f"/v1/placements/{short['id']}")
        return bool(answer.json()["state"] == "expired")

    for _ in range(4):  # renew "kept" every 0.5 s for 2 s
        renewed = await client.post(f"/v1/placements/{kept['id']}/renew")
        assert renewed.status_code == 200
        await asyncio.sleep(0.5)
    await wait_until(short_expired)
    assert (await client.get(f"/v1/placements/{kept['id']}")).json()["state"] == "placed"
    assert [e.event for e in await placement_events(kafka_bootstrap, short["id"], 2)] == [
        "created",
        "expired",
    ]
    refused = await client.post(f"/v1/placements/{short['id']}/renew")
    assert refused.status_code == 409
    assert refused.json()["error"] == "not_live"


async def test_listing_pages_newest_first_and_filters(api: tuple[httpx.AsyncClient, str]) -> None:
    client, _ = api
    ids = [
        (await client.post("/v1/placements", json=job(f"l{i}", gpus=1))).json()["id"]
        for i in range(3)
    ]
    await client.delete(f"/v1/placements/{ids[0]}")
    page = (await client.get("/v1/placements", params={"limit": 2})).json()
    assert [p["id"] for p in page["items"]] == [ids[2], ids[1]]
    rest = (
        await client.get("/v1/placements", params={"limit": 2, "before_ms": page["next_before_ms"]})
    ).json()
    assert [p["id"] for p in rest["items"]] == [ids[0]]
    assert rest["next_before_ms"] is None
    live = (await client.get("/v1/placements", params={"state": "placed"})).json()
    assert {p["id"] for p in live["items"]} == {ids[1], ids[2]}


async def test_bad_ids_and_bodies_are_422_and_unknown_ids_404(
    api: tuple[httpx.AsyncClient, str],
) -> None:
    client, _ = api
    assert (await client.get("/v1/placements/not-a-uuid")).status_code == 422
    missing = "00000000-0000-0000-0000-000000000000"
    assert (await client.get(f"/v1/placements/{missing}")).status_code == 404
    assert (await client.delete(f"/v1/placements/{missing}")).status_code == 404
    bad = await client.post("/v1/placements", json=job("x", lease_s=-1))
    assert bad.status_code == 422
    assert bad.json()["detail"][0]["loc"] == ["body", "lease_s"]
    unknown = await client.post("/v1/placements", json=job("y", models=["Voodoo5"]))
    assert unknown.status_code == 422
    assert unknown.json()["detail"][0]["loc"] == ["body", "models", 0]  # the item itself
    # Strict as the schema: a boolean is not a GPU count, an integral float is an integer.
    truthy = await client.post("/v1/placements", json={"job_id": "z", "gpus_per_node": True})
    assert truthy.status_code == 422
    assert truthy.json()["detail"][0]["loc"] == ["body", "gpus_per_node"]


async def test_the_extenders_node_summaries_follow_the_scores_without_a_call(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    """The follower brings them up to date after each batch, off the request path."""
    node = f"summary-{unique}"
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap, database_url=database_url, auth_disabled=True
    )
    async with running_scheduler(settings) as (_, app):
        await publish_scores(kafka_bootstrap, node, [0.95, 0.9, 0.85, 0.5])
        summaries = app.state.extender.summaries

        async def summarised() -> bool:
            at = summaries.ids.get(node)
            return at is not None and int(summaries.tally[at, FREE]) == 3  # 0.5 is below

        await wait_until(summarised)


async def test_startup_freezes_the_caught_up_fleet_out_of_the_collectors_walks(
    kafka_bootstrap: str, database_url: str
) -> None:
    """Once the scores are caught up the fleet view is frozen (no generation the cyclic
    collector walks holds it) and the first threshold set; at shutdown, unfrozen and
    the thresholds as they were."""
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        auth_disabled=True,
        gc_gen0_threshold=7_007,
    )
    thresholds = gc.get_threshold()
    try:
        async with running_scheduler(settings) as (_, app):

            async def frozen() -> bool:
                return gc.get_freeze_count() > 0

            await wait_until(frozen)
            assert app.state.runtime.follower.caught_up
            fleet = app.state.runtime.fleet
            assert not any(tracked is fleet for tracked in gc.get_objects())
            assert gc.get_threshold()[0] == 7_007
        assert gc.get_freeze_count() == 0
        assert any(tracked is fleet for tracked in gc.get_objects())
        assert gc.get_threshold() == thresholds
    finally:
        gc.set_threshold(*thresholds)


async def test_a_tombstone_is_a_delete_and_a_bad_score_is_rejected(
    kafka_bootstrap: str, database_url: str, unique: str
) -> None:
    """Both are skipped; only the bad record counts as rejected."""
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap, database_url=database_url, auth_disabled=True
    )
    async with running_scheduler(settings) as (_, app):
        follower: ScoresFollower = app.state.runtime.follower
        rejected, deleted = follower.rejected, follower.deleted
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            await producer.send_and_wait(GPU_SCORES, None, key=f"GPU-gone-{unique}".encode())
            await producer.send_and_wait(GPU_SCORES, b"{}", key=f"GPU-bad-{unique}".encode())
        finally:
            await producer.stop()

        async def both_read() -> bool:
            return follower.rejected > rejected and follower.deleted > deleted

        await wait_until(both_read)
        assert (follower.rejected - rejected, follower.deleted - deleted) == (1, 1)


async def test_extender_speaks_the_kube_scheduler_json(api: tuple[httpx.AsyncClient, str]) -> None:
    client, node = api
    pod = {
        "metadata": {"name": "train-0", "annotations": {"fairlane.dev/gpu-models": "B200"}},
        "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
    }
    args = {"Pod": pod, "Nodes": None, "NodeNames": [node, "not-a-gpu-node"]}
    filtered = (await client.post("/v1/extender/filter", json=args)).json()
    assert filtered["NodeNames"] == [node]
    assert filtered["FailedNodes"] == {}
    assert list(filtered["FailedAndUnresolvableNodes"]) == ["not-a-gpu-node"]
    assert filtered["Error"] == ""
    ranked = (await client.post("/v1/extender/prioritize", json=args)).json()
    assert ranked == [{"Host": node, "Score": 10}, {"Host": "not-a-gpu-node", "Score": 0}]
    # Without nodeCacheCapable the node objects come and go back whole.
    full = {"Pod": pod, "Nodes": {"kind": "NodeList", "items": [{"metadata": {"name": node}}]}}
    kept = (await client.post("/v1/extender/filter", json=full)).json()
    assert kept["Nodes"]["items"] == [{"metadata": {"name": node}}]
    assert kept["NodeNames"] is None
    # A CPU-only pod: Fairlane has no opinion, so every node passes and none is preferred.
    cpu_only = {**args, "Pod": {**pod, "spec": {"containers": [{"name": "web"}]}}}
    passed = (await client.post("/v1/extender/filter", json=cpu_only)).json()
    assert passed["NodeNames"] == [node, "not-a-gpu-node"]
    assert (passed["Error"], passed["FailedNodes"], passed["FailedAndUnresolvableNodes"]) == (
        "",
        {},
        {},
    )
    ranked = (await client.post("/v1/extender/prioritize", json=cpu_only)).json()
    assert ranked == [{"Host": node, "Score": 0}, {"Host": "not-a-gpu-node", "Score": 0}]


async def test_a_gang_spans_nodes_with_ranks_and_one_master(
    api: tuple[httpx.AsyncClient, str], kafka_bootstrap: str, unique: str
) -> None:
    client, _ = api
    fast, slow = f"gang-fast-{unique}", f"gang-slow-{unique}"  # L40S: no other test uses it
    await publish_scores(kafka_bootstrap, fast, [0.97, 0.96], model="NVIDIA L40S")
    await publish_scores(kafka_bootstrap, slow, [0.8, 0.9, 0.2], model="NVIDIA L40S")
    await wait_for_gpus(client, fast, 2)
    await wait_for_gpus(client, slow, 3)
    request = {"job_id": "gang", "gpus_per_node": 2, "nodes": 2, "models": ["L40S"]}
    gang = await client.post("/v1/placements", json=request)
    assert gang.status_code == 201, gang.text
    nodes = gang.json()["nodes"]
    assert [n["node"] for n in nodes] == [fast, slow]  # the faster node leads
    assert [n["node_rank"] for n in nodes] == [0, 1]
    assert [g["index"] for g in nodes[1]["gpus"]] == [0, 1]  # not the 0.2 GPU
    assert {n["master_addr"] for n in nodes} == {fast}
    assert {n["world_size"] for n in nodes} == {4}
    assert len({n["master_port"] for n in nodes}) == 1
    too_big = await client.post("/v1/placements", json={**request, "job_id": "g2", "nodes": 3})
    assert too_big.status_code == 409


async def test_nodes_show_each_gpu_state_and_score_breakdown(
    api: tuple[httpx.AsyncClient, str],
) -> None:
    client, _ = api
    placed = (await client.post("/v1/placements", json=job("n1", gpus=1))).json()
    # Every B200 node of this module has the same scores; any of them may be chosen.
    node, taken = placed["nodes"][0]["node"], placed["nodes"][0]["gpus"][0]["uuid"]

    async def allocation_seen() -> bool:
        detail = (await client.get(f"/v1/nodes/{node}")).json()
        return any(g["uuid"] == taken and g["state"] == "allocated" for g in detail["gpus"])

    await wait_until(allocation_seen)
    detail = (await client.get(f"/v1/nodes/{node}")).json()
    states = {g["index"]: g["state"] for g in detail["gpus"]}
    assert states == {0: "allocated", 1: "free", 2: "free", 3: "score below threshold"}
    summary = next(n for n in (await client.get("/v1/nodes")).json() if n["node"] == node)
    assert (summary["gpus"], summary["free"]) == (4, 2)
    assert (await client.get("/v1/nodes/nowhere")).status_code == 404


async def test_queued_requests_wait_and_are_placed_by_priority_when_gpus_free(
    api: tuple[httpx.AsyncClient, str], kafka_bootstrap: str, unique: str
) -> None:
    client, _ = api
    node = f"queue-{unique}"  # T4: no other test uses it; three qualifying GPUs
    await publish_scores(kafka_bootstrap, node, [0.9, 0.9, 0.9], model="Tesla T4")
    t4 = {"gpus_per_node": 3, "models": ["T4"]}

    await wait_for_gpus(client, node, 3)
    first = (await client.post("/v1/placements", json={"job_id": "q-first", **t4})).json()
    assert first.get("state") == "placed", first
    refused = await client.post("/v1/placements", json={"job_id": "q-no", **t4})
    assert refused.status_code == 409  # did not ask to queue
    low = await client.post("/v1/placements", json={"job_id": "q-low", "queue": True, **t4})
    high = await client.post(
        "/v1/placements", json={"job_id": "q-high", "queue": True, "priority": 5, **t4}
    )
    assert (low.status_code, high.status_code) == (202, 202)
    assert low.json()["state"] == high.json()["state"] == "pending"
    assert low.json()["nodes"] == []
    await client.delete(f"/v1/placements/{first['id']}")

    async def high_placed() -> bool:
        answer = await client.get(f"/v1/placements/{high.json()['id']}")
        return bool(answer.json()["state"] == "placed")

    await wait_until(high_placed)
    assert (await client.get(f"/v1/placements/{low.json()['id']}")).json()["state"] == "pending"
    cancelled = await client.delete(f"/v1/placements/{low.json()['id']}")
    assert cancelled.json()["state"] == "released"
    events = await placement_events(kafka_bootstrap, high.json()["id"], 2)
    assert [e.event for e in events] == ["pending", "created"]
    assert len(events[1].nodes[0].gpus) == 3
