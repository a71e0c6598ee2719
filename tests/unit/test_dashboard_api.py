"""The dashboard's HTTP surface on the real router and token table, with the feed
drawing frames from an in-memory fleet: the page and its assets need no token, every
read does (header, login cookie or ``?token=``), and the event stream sends the whole
fleet first, then only what changed, with each caller's own placements."""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Counter

from fairlane_events.records import GpuSlot, NodeAssignment
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.adapters.dashboard_feed import DashboardFeed
from fairlane_scheduler.api import dashboard
from fairlane_scheduler.api.auth import Caller, TokenTable
from fairlane_scheduler.api.errors import install_error_handlers
from fairlane_scheduler.core.dashboard import SharedGpus
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.ledger import Holding, Ledger
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.core.shares import GpuUse
from fairlane_scheduler.settings import SchedulerSettings
from tests.factories import gpu_score

NOW = 1_700_000_000_000
ADMIN, TEAM_A = "admin-secret", "team-a-secret"


def placement(pid: str, namespace: str, uuid: str) -> Placement:
    node = NodeAssignment(
        node="node-a",
        node_rank=0,
        gpus=[GpuSlot(uuid=uuid, index=0)],
        cuda_visible_devices="0",
        master_addr="node-a",
        master_port=29500,
        world_size=1,
    )
    return Placement(pid, f"job-{pid}", namespace, "placed", NOW, (node,), "f")


PLACEMENTS = [placement("p1", "team-a", "GPU-a-0"), placement("p2", "team-b", "GPU-a-1")]


def make_feed(
    fleet: FleetView, idle: frozenset[str] = frozenset(), shares: SharedGpus | None = None
) -> DashboardFeed:
    async def lists() -> tuple[Sequence[Placement], Sequence[Placement]]:
        return PLACEMENTS, []

    failures = Counter("failures", "", registry=CollectorRegistry())
    return DashboardFeed(
        fleet=fleet,
        allocated=lambda: {"GPU-a-0", "GPU-a-1"},
        policy=PlacementPolicy(threshold=0.65, stale_after_s=60),
        lists=lists,
        counters=lambda: {"rejected": 0},
        clock_ms=lambda: NOW,
        outage=OutageLog(logging.getLogger("test"), "dashboard", failures),
        idle=lambda: idle,
        shares=shares,
    )


@pytest.fixture
def fleet() -> FleetView:
    fleet = FleetView()
    for node in ("node-a", "node-b"):
        for i in range(2):
            fleet.apply(gpu_score(node=node, uuid=f"GPU-{node[-1]}-{i}", index=i, ts_ms=NOW))
    return fleet


@pytest.fixture
async def client(fleet: FleetView) -> AsyncIterator[httpx.AsyncClient]:
    app = FastAPI()
    settings = SchedulerSettings(
        admin_token=ADMIN,
        namespace_tokens={"team-a": TEAM_A},
    )
    app.state.tokens = TokenTable(settings)
    feed = make_feed(fleet)
    await feed.tick()
    app.state.dashboard = feed
    install_error_handlers(app)
    app.include_router(dashboard.router)
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as c:
        yield c


async def test_the_page_needs_no_token_and_loads_nothing_from_elsewhere(
    client: httpx.AsyncClient,
) -> None:
    page = await client.get("/dashboard")
    assert page.status_code == 200
    sources = re.findall(r'(?:src|href)="([^"]+)"', page.text)
    assert sources
    assert "script-src 'self'" in page.headers["content-security-policy"]
    for source in sources:
        if source == "data:,":  # the empty favicon: no request at all
            continue
        assert source.startswith("/dashboard/static/"), source
        asset = await client.get(source)
        assert asset.status_code == 200, source
        assert asset.headers["content-type"].split(";")[0] in ("text/javascript", "text/css")


@pytest.mark.parametrize("name", ["../__init__.py", "index.html", "vendor/uplot.LICENSE", "x.js"])
async def test_only_the_listed_assets_are_served(client: httpx.AsyncClient, name: str) -> None:
    assert (await client.get(f"/dashboard/static/{name}")).status_code == 404


async def test_login_checks_the_token_and_sets_an_httponly_cookie(
    client: httpx.AsyncClient,
) -> None:
    assert (await client.get("/dashboard/session")).status_code == 401
    assert (await client.post("/dashboard/session", json={"token": "nope"})).status_code == 401
    answer = await client.post("/dashboard/session", json={"token": TEAM_A})
    assert answer.status_code == 204
    cookie = answer.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie
    assert "path=/dashboard" in cookie
    assert (await client.get("/dashboard/session")).json() == {
        "namespace": "team-a",
        "admin": False,
    }
    await client.delete("/dashboard/session")
    client.cookies.clear()
    assert (await client.get("/dashboard/session")).status_code == 401


async def test_history_is_read_with_a_header_or_a_query_token(client: httpx.AsyncClient) -> None:
    path = "/dashboard/gpus/GPU-a-0/history"
    assert (await client.get(path)).status_code == 401
    by_query = await client.get(path, params={"token": ADMIN})
    by_header = await client.get(path, headers={"Authorization": f"Bearer {ADMIN}"})
    assert (
        by_query.json()
        == by_header.json()
        == {
            "uuid": "GPU-a-0",
            "ts_ms": [NOW],
            "score": [0.9],
        }
    )
    assert (await client.get("/dashboard/gpus/GPU-x/history?token=" + ADMIN)).status_code == 404
    assert (await client.get("/dashboard/events")).status_code == 401


def data(event: str) -> dict[str, Any]:
    assert event.startswith("event: frame\ndata: ")
    decoded: dict[str, Any] = json.loads(event.removeprefix("event: frame\ndata: "))
    return decoded


async def test_events_send_the_fleet_then_only_what_changed(fleet: FleetView) -> None:
    feed = make_feed(fleet)
    await feed.tick()
    events = dashboard.frame_events(feed, Caller("team-a"))
    first = data(await anext(events))
    assert first["full"] is True
    assert first["threshold"] == 0.65
    assert set(first["rows"]) == {"node-a", "node-b"}
    assert [c["st"] for c in first["rows"]["node-a"]] == ["allocated", "allocated"]
    assert [p["id"] for p in first["placements"]] == ["p1"]  # team-a's only
    assert first["pending"] == []
    assert first["counters"] == {"rejected": 0}

    fleet.apply(gpu_score(node="node-b", uuid="GPU-b-1", index=1, score=0.3, ts_ms=NOW + 1))
    await feed.tick()
    second = data(await anext(events))
    assert set(second) == {"seq", "ts_ms", "rows"}  # lists and counters did not change
    assert list(second["rows"]) == ["node-b"]
    assert second["rows"]["node-b"][1]["st"] == "below threshold"

    # Frames that change nothing send nothing, until the keepalive comment is due.
    next_event = asyncio.ensure_future(anext(events))
    for _ in range(dashboard._KEEPALIVE_FRAMES):
        await asyncio.sleep(0.01)
        assert not next_event.done()
        await feed.tick()
    assert await asyncio.wait_for(next_event, 1) == ": keepalive\n\n"
    await events.aclose()
    assert feed.watchers == 0


async def test_a_placement_in_an_idle_episode_is_marked_idle(fleet: FleetView) -> None:
    feed = make_feed(fleet, idle=frozenset({"p2"}))
    await feed.tick()
    events = dashboard.frame_events(feed, Caller(None))
    rows = {p["id"]: p["idle"] for p in data(await anext(events))["placements"]}
    assert rows == {"p1": False, "p2": True}
    await events.aclose()


async def test_a_gpu_the_ledger_knows_shared_is_sent_with_its_share(fleet: FleetView) -> None:
    ledger = Ledger(fleet)
    ledger.commit(
        Holding("p1", "team-a", "node-a", 29500, ("GPU-a-0",), ("",), GpuUse(400, 8192, 1))
    )
    feed = make_feed(fleet, shares=ledger)
    await feed.tick()
    events = dashboard.frame_events(feed, Caller(None))
    cells = data(await anext(events))["rows"]["node-a"]
    assert [c.get("sh") for c in cells] == [[0.4, 1, 8192, 80 * 1024], None]
    await events.aclose()
