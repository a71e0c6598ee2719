"""The placement choice read from per-node summaries (core/placement_summary.py), end to
end: through the API on real Kafka and Postgres, every decision equals the full scan's
(``choose`` on the same fleet view and holds) for fastest, spread, binpack, a gang, a
model filter on a node that mixes models, a memory filter and a refusal.

A fleet takes the summaries from ``summaries_from_nodes`` nodes (24 by default; every
other integration test has fewer, so only the full scan runs there); this scheduler sets
it to 1. The test's GPUs are K80s and P100s, models no other test asks for, so the
scores other tests leave on the shared topic never fit its requests (the memory filter
asks for more than any other test's GPU has), and it flags them stale when it ends.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from fastapi import FastAPI

from fairlane_scheduler.clock import now_ms
from fairlane_scheduler.core.placement import Choice, JobShape, NoPlacement, choose
from fairlane_scheduler.settings import SchedulerSettings
from tests.scheduler_harness import node_scores, publish, running_scheduler, wait_for_node

pytestmark = pytest.mark.integration

K80, P100 = "Tesla K80", "Tesla P100-SXM2-16GB"
BIG = 1000  # GiB: more than any GPU of another test reports
#: node suffix -> its GPUs (model, score, memory GiB), index = position. Capacity = score.
FLEET: dict[str, list[tuple[str, float, int]]] = {
    "a": [(K80, 0.99, 12), (K80, 0.98, 12), (P100, 0.99, 16), (P100, 0.99, 16)],  # mixed
    "b": [(K80, 0.85, 12)] * 4,
    "c": [(K80, 0.75, 12)] * 4,
    "d": [(K80, 0.72, 12)] * 8,
    "e": [(K80, 0.5, 12)] * 4,  # below the threshold: never chosen
    "g": [(K80, 0.9, BIG), (K80, 0.9, BIG), (K80, 0.97, 12), (K80, 0.97, 12)],  # mixed memory
}


@dataclass(frozen=True)
class Scheduler:
    client: httpx.AsyncClient
    app: FastAPI
    prefix: str  # of this test's node names


async def _publish(bootstrap: str, prefix: str, *, stale: bool = False) -> None:
    """Every GPU of FLEET; ``stale``: flagged stale, which retires them from the fleet
    views of the schedulers that follow."""
    ts = int(time.time() * 1000)
    records = [
        record
        for suffix, gpus in FLEET.items()
        for record in node_scores(f"{prefix}{suffix}", gpus, speed=1.0, ts_ms=ts, stale=stale)
    ]
    await publish(bootstrap, records)


@pytest.fixture
async def scheduler(
    kafka_bootstrap: str, database_url: str, unique: str
) -> AsyncIterator[Scheduler]:
    prefix = f"sum-{unique}-"
    await _publish(kafka_bootstrap, prefix)
    settings = SchedulerSettings(
        kafka_bootstrap_servers=kafka_bootstrap,
        database_url=database_url,
        auth_disabled=True,
        summaries_from_nodes=1,
    )
    async with running_scheduler(settings) as (client, app):
        for suffix, gpus in FLEET.items():
            await wait_for_node(app, f"{prefix}{suffix}", len(gpus))
        try:
            yield Scheduler(client, app, prefix)
        finally:
            await _publish(kafka_bootstrap, prefix, stale=True)


def _gangs(choice: Choice, uuids: list[str]) -> list[tuple[str, list[str]]]:
    return [(n.node, sorted(uuids[r] for r in n.rows)) for n in choice.nodes]


def _placed(body: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(n["node"], sorted(g["uuid"] for g in n["gpus"])) for n in body["nodes"]]


async def _place(s: Scheduler, job_id: str, **request: Any) -> list[str]:
    """Place through the API and check the answer against the full scan of the same
    view, computed just before; the chosen nodes' suffixes, in rank order."""
    runtime = s.app.state.runtime
    fleet = runtime.fleet
    memory = request.get("min_gpu_memory_gib")
    shape = JobShape(
        gpus_per_node=request["gpus_per_node"],
        nodes=request.get("nodes", 1),
        min_gpu_memory_gib=memory,
        models=frozenset(request["models"]) if "models" in request else None,
        policy=request["policy"],
    )
    scan = choose(fleet, shape, runtime.policy, fleet.held_rows(), now_ms())
    answer = await s.client.post("/v1/placements", json={"job_id": job_id, **request})
    if isinstance(scan, NoPlacement):
        assert answer.status_code == 409, answer.text
        # Not the other tests' GPUs (stale, or of another model): one may turn stale
        # between the scan and the decision. This test's GPUs are fresh and all K80s.
        others = ("stale", "model not allowed")
        mine = {why: n for why, n in scan.reasons.items() if why not in others}
        assert {w: n for w, n in answer.json()["rejections"].items() if w not in others} == mine
        assert mine["allocated"] == 13  # the GPUs placed so far: 2 + 1 + 1 + 1 + 2 + 2 x 3
        return []
    assert answer.status_code == 201, answer.text
    assert _placed(answer.json()) == _gangs(scan, fleet.uuids)
    return [node.removeprefix(s.prefix) for node, _ in _placed(answer.json())]


async def test_decisions_from_summaries_equal_the_full_scan(scheduler: Scheduler) -> None:
    s = scheduler
    summaries = s.app.state.runtime.service.rankings.summaries
    assert not summaries.ids  # nothing has read them yet
    k80 = {"models": ["K80"]}
    # fastest: the highest slowest GPU; on the mixed node only its K80s count.
    assert await _place(s, "fast", gpus_per_node=2, policy="fastest", **k80) == ["a"]
    # A memory filter alone, on a node whose GPUs differ in memory: a big one, though
    # two smaller ones score higher.
    big = {"min_gpu_memory_gib": BIG}
    assert await _place(s, "big", gpus_per_node=1, policy="binpack", **big) == ["g"]
    # spread: the least used nodes (a and g, partly used, come last), then the fastest.
    assert await _place(s, "s1", gpus_per_node=1, policy="spread", **k80) == ["b"]
    assert await _place(s, "s2", gpus_per_node=1, policy="spread", **k80) == ["c"]
    # binpack: the fewest free GPUs that still fit (g, b and c have 3; g is the fastest).
    assert await _place(s, "pack", gpus_per_node=2, policy="binpack", **k80) == ["g"]
    # A gang of two nodes with 3 free each (b, c, d), the fastest first; c and d are
    # equally fast (one resolution step), c the fuller.
    gang = await _place(s, "gang", gpus_per_node=3, nodes=2, policy="fastest", **k80)
    assert gang == ["b", "c"]
    # Nothing fits: the refusal and its counts are the full scan's.
    assert await _place(s, "none", gpus_per_node=4, nodes=3, policy="spread", **k80) == []
    # The decisions did read the summaries, refreshed on the whole fleet view.
    assert summaries.unknown == len(s.app.state.runtime.fleet.nodes)
    assert {f"{s.prefix}{x}" for x in FLEET} <= summaries.ids.keys()
