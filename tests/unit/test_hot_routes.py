"""The lean path for place and release (api/hot_routes.py) answers exactly as the
FastAPI routes do: the same requests, good and bad, sent to the scheduler's routes with
and without it in front, over the in-memory twin of the store, get the same status,
headers that matter and body (ids and clock are injected, so they match too)."""

from __future__ import annotations

import itertools
from typing import Any, cast

import httpx
from fastapi import FastAPI
from pydantic import SecretStr

from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.api.auth import TokenTable
from fairlane_scheduler.api.deps import Runtime, SchedulerMetrics
from fairlane_scheduler.api.errors import install_error_handlers
from fairlane_scheduler.api.hot_routes import HotRoutes
from fairlane_scheduler.api.routes import router
from fairlane_scheduler.api.schemas import PlacementIn
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.service import PlacementService
from fairlane_scheduler.settings import SchedulerSettings
from tests.factories import gpu_score

NOW = 1_700_000_000_000
ADMIN, TEAM = {"Authorization": "Bearer root"}, {"Authorization": "Bearer a"}
ONE_ID = "00000000-0000-0000-0000-000000000001"

# (method, path, headers, body: JSON-able, or bytes sent as they are)
REQUESTS: list[tuple[str, str, dict[str, str], Any]] = [
    ("POST", "/v1/placements", TEAM, {"job_id": "j1", "gpus_per_node": 2}),
    ("POST", "/v1/placements", TEAM, {"job_id": "j1", "gpus_per_node": 2}),  # replay: 200
    ("POST", "/v1/placements", TEAM, {"job_id": "j1", "gpus_per_node": 3}),  # job conflict
    ("POST", "/v1/placements", TEAM, {"job_id": "j2", "gpus_per_node": 64}),  # no capacity
    ("POST", "/v1/placements", TEAM, {"job_id": "j3", "gpus_per_node": 1, "namespace": "b"}),
    ("POST", "/v1/placements", ADMIN, {"job_id": "j3", "gpus_per_node": 1, "namespace": "b"}),
    ("POST", "/v1/placements", TEAM, {"job_id": "j4", "gpus_per_node": "2"}),  # 422
    ("POST", "/v1/placements", TEAM, {"job_id": "j4", "gpus_per_node": 1, "color": "red"}),
    ("POST", "/v1/placements", TEAM, {"job_id": "j8", "gpus_per_node": 1, "job_class": "bert"}),
    ("POST", "/v1/placements", TEAM, {"job_id": "j9", "gpus_per_node": 1, "job_class": "a/b"}),
    ("POST", "/v1/placements", TEAM, b'{"job_id": "j5", "gpus_per_node": 1, "lease_s": -1}'),
    ("POST", "/v1/placements", TEAM, b'{"job_id": "j5", "gpus_per_node": '),  # not JSON
    ("POST", "/v1/placements", TEAM, b'{"job_id": "j5", "gpus_per_node": 1, "lease_s": NaN}'),
    ("POST", "/v1/placements", TEAM, b""),
    (
        "POST",
        "/v1/placements",
        {**TEAM, "Content-Type": "text/plain"},
        b'{"job_id": "j6", "gpus_per_node": 1}',
    ),
    ("POST", "/v1/placements", {}, {"job_id": "j7", "gpus_per_node": 1}),  # no token
    ("POST", "/v1/placements", {"Authorization": "Bearer nope"}, {"job_id": "j7"}),
    ("DELETE", f"/v1/placements/{ONE_ID}", {"Authorization": "Bearer nope"}, None),
    ("DELETE", f"/v1/placements/{ONE_ID}", TEAM, None),
    ("DELETE", f"/v1/placements/{ONE_ID}", TEAM, None),  # released already: unchanged
    ("DELETE", f"/v1/placements/{ONE_ID.replace('0', 'A')}", TEAM, None),  # not canonical
    ("DELETE", "/v1/placements/00000000-0000-0000-0000-00000000000f", TEAM, None),  # 404
    ("DELETE", "/v1/placements/not-a-uuid", TEAM, None),  # 422
    ("DELETE", "/v1/placements", TEAM, None),  # 405
    ("POST", "/v1/placements/", TEAM, {"job_id": "j8", "gpus_per_node": 1}),
]


def _app(*, hot: bool, routes: bool = True) -> FastAPI:
    fleet = FleetView()
    for i in range(4):
        fleet.apply(gpu_score(node="n0", uuid=f"n0-{i}", index=i, score=0.9, ts_ms=NOW))
    ids = (f"00000000-0000-0000-0000-{i:012d}" for i in itertools.count(1))
    policy = PlacementPolicy(threshold=0.65, stale_after_s=90)
    service = PlacementService(
        store=MemoryStore(),
        fleet=fleet,
        policy=policy,
        ports=PortRange(29500, 29999),
        clock_ms=lambda: NOW,
        is_fleet_ready=lambda: True,
        new_id=lambda: next(ids),
    )
    settings = SchedulerSettings(
        admin_token=SecretStr("root"), namespace_tokens={"a": SecretStr("a")}
    )
    app = FastAPI()
    app.state.tokens = TokenTable(settings)
    # The placement routes read the service, the metrics and nothing else of the runtime.
    fields: dict[str, Any] = {"follower": None, "fresh_gpus": lambda: 4, "live_gpus": None}
    app.state.runtime = Runtime(
        service, fleet, metrics=SchedulerMetrics.create(), policy=policy, **cast(Any, fields)
    )
    install_error_handlers(app)
    if routes:
        app.include_router(router)
    if hot:
        app.add_middleware(HotRoutes)
    return app


async def _answers(app: FastAPI) -> list[tuple[int, str | None, str | None, bytes]]:
    answers = []
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for method, path, headers, body in REQUESTS:
            if isinstance(body, bytes):
                json_type = {"Content-Type": "application/json", **headers}
                answer = await client.request(method, path, content=body, headers=json_type)
            else:
                answer = await client.request(method, path, json=body, headers=headers)
            www, allow = answer.headers.get("www-authenticate"), answer.headers.get("allow")
            answers.append((answer.status_code, www, allow, answer.content))
    return answers


async def test_the_lean_path_answers_as_the_routes_do() -> None:
    lean, routes = await _answers(_app(hot=True)), await _answers(_app(hot=False))
    for request, got, want in zip(REQUESTS, lean, routes, strict=True):
        assert got == want, request
    statuses = [status for status, *_ in lean]
    assert statuses[:4] == [201, 200, 409, 409]  # placed, replayed, job and GPU conflicts
    assert {403, 401, 422, 404, 405} <= set(statuses)


async def test_the_lean_path_serves_place_and_release_without_the_routes() -> None:
    transport = httpx.ASGITransport(app=_app(hot=True, routes=False))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        placed = await client.post("/v1/placements", json=REQUESTS[0][3], headers=TEAM)
        assert placed.status_code == 201
        released = await client.delete(f"/v1/placements/{placed.json()['id']}", headers=TEAM)
        assert (released.status_code, released.json()["state"]) == (200, "released")
        bad = await client.post("/v1/placements", json={"job_id": "x"}, headers=TEAM)
        assert bad.status_code == 404  # handed on: no route here to answer the 422


async def test_a_non_finite_number_gets_a_422_naming_its_field() -> None:
    transport = httpx.ASGITransport(app=_app(hot=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for value in (b"NaN", b"Infinity", b"-Infinity"):
            body = b'{"job_id": "j", "gpus_per_node": 1, "lease_s": %s}' % value
            json_type = {"Content-Type": "application/json", **TEAM}
            answer = await client.post("/v1/placements", content=body, headers=json_type)
            assert answer.status_code == 422, (value, answer.text)
            assert [e["loc"] for e in answer.json()["detail"]] == [["body", "lease_s"]]


async def test_an_integer_beyond_64_bits_gets_a_422_naming_its_field() -> None:
    """orjson cannot write it back as the error's ``input`` (the chaos suite's fuzzer got
    a 500 for it from PUT /v1/nodes/{name}/cordon)."""
    transport = httpx.ASGITransport(app=_app(hot=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        huge = -80557207479251073664811008
        for path, method, body in (
            ("/v1/placements", "POST", {"job_id": "j", "gpus_per_node": 1, "lease_s": {"": huge}}),
            ("/v1/nodes/n0/cordon", "PUT", {"reason": {"": huge}}),
        ):
            answer = await client.request(method, path, json=body, headers=ADMIN)
            assert answer.status_code == 422, (path, answer.text)
            field = "lease_s" if path == "/v1/placements" else "reason"
            assert [e["loc"] for e in answer.json()["detail"]] == [["body", field]]


async def test_a_bad_job_class_gets_a_422_naming_its_field() -> None:
    transport = httpx.ASGITransport(app=_app(hot=True))
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as client:
        for job_class in ("", "gpu/bert", "-lead", "x" * 65, 7):
            body = {"job_id": "j", "gpus_per_node": 1, "job_class": job_class}
            answer = await client.post("/v1/placements", json=body, headers=TEAM)
            assert answer.status_code == 422, (job_class, answer.text)
            assert [e["loc"] for e in answer.json()["detail"]] == [["body", "job_class"]]


def test_a_request_without_a_job_class_keeps_its_fingerprint() -> None:
    """Placements stored before ``job_class`` existed replay for the same body (200, not
    409): the field is left out of the canonical body when it is not given."""
    plain = PlacementIn.model_validate({"job_id": "j", "gpus_per_node": 1})
    assert b"job_class" not in plain.canonical_json("team")
    classed = PlacementIn.model_validate({"job_id": "j", "gpus_per_node": 1, "job_class": "bert"})
    assert classed.to_core("team").fingerprint != plain.to_core("team").fingerprint
    assert classed.to_core("team").job_class == "bert"
