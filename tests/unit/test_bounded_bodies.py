"""Bounded request bodies (api/bodies.py) in front of the scheduler's real app, called as
ASGI with a ``receive`` the test controls: what was read before the answer is known to
the byte, and a refusal that should read nothing proves it never called ``receive``."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from pydantic import SecretStr

from fairlane_scheduler.api import bodies
from fairlane_scheduler.api.schemas import GPU_MODEL_NAMES, CordonIn, PlacementIn
from fairlane_scheduler.app import create_app
from fairlane_scheduler.settings import SchedulerSettings

LIMIT = 64 * 1024
TEAM = [(b"authorization", b"Bearer a")]


@pytest.fixture(autouse=True)
def _short_linger(monkeypatch: pytest.MonkeyPatch) -> None:
    """An early answer waits a second before its connection closes; not here."""
    monkeypatch.setattr(bodies, "_LINGER_S", 0.01)


def _app(**settings: Any) -> FastAPI:
    """The scheduler's app, no lifespan: nothing here gets as far as the placement service."""
    app = create_app(
        SchedulerSettings(
            database_url="postgresql://x@127.0.0.1:1/x",
            kafka_bootstrap_servers="127.0.0.1:1",
            admin_token=SecretStr("root"),
            namespace_tokens={"a": SecretStr("a")},
            **settings,
        )
    )
    app.state.runtime = None  # validation answers before a route reads it
    return app


@dataclass
class Client:
    """A body of ``chunks`` (``None``: the client goes quiet), counted as it is read;
    ``read_first`` is what had been read when the answer began."""

    chunks: list[bytes | None]
    calls: int = 0
    read: int = 0
    read_first: tuple[int, int] | None = None  # (receive calls, bytes) at the answer
    sent: list[dict[str, Any]] = field(default_factory=list)

    async def receive(self) -> dict[str, Any]:
        self.calls += 1
        if not self.chunks:
            await asyncio.Event().wait()  # nothing more will come
        chunk = self.chunks.pop(0)
        if chunk is None:
            await asyncio.Event().wait()
        assert chunk is not None
        self.read += len(chunk)
        return {"type": "http.request", "body": chunk, "more_body": bool(self.chunks)}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        if not self.sent:
            self.read_first = (self.calls, self.read)
        self.sent.append(dict(message))

    @property
    def status(self) -> int:
        return int(self.sent[0]["status"])

    @property
    def headers(self) -> dict[bytes, bytes]:
        return dict(self.sent[0]["headers"])

    @property
    def body(self) -> dict[str, Any]:
        answer: dict[str, Any] = json.loads(b"".join(m.get("body", b"") for m in self.sent[1:]))
        return answer


async def _call(
    app: FastAPI, path: str, headers: list[tuple[bytes, bytes]], client: Client
) -> Client:
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": [(b"content-type", b"application/json"), *headers],
        "server": ("127.0.0.1", 8080),
        "client": ("127.0.0.1", 50000),
    }
    await asyncio.wait_for(app(scope, client.receive, client.send), 10)
    return client


def _refused(client: Client, status: int, error: str) -> None:
    assert client.status == status
    assert client.headers[b"connection"] == b"close"  # uvicorn drops the rest unread
    assert client.body["error"] == error
    assert client.sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert client.read_first is not None
    assert client.calls == client.read_first[0]  # nothing read after the answer began


async def test_a_declared_length_over_the_limit_is_refused_unread() -> None:
    client = Client([b"x" * 1024] * 4)
    length = [(b"content-length", str(1 << 30).encode())]
    await _call(_app(), "/v1/placements", [*TEAM, *length], client)
    _refused(client, 413, "body_too_large")
    assert client.read_first == (0, 0)


async def test_a_chunked_body_is_refused_the_moment_it_passes_the_limit() -> None:
    chunked = [(b"transfer-encoding", b"chunked")]
    client = Client([b"x" * 16 * 1024] * 64)  # 1 MiB on offer
    await _call(_app(), "/v1/placements", [*TEAM, *chunked], client)
    _refused(client, 413, "body_too_large")
    assert client.read_first == (5, LIMIT + 16 * 1024)  # the chunk that passed it, no more


@pytest.mark.parametrize("token", [None, b"Bearer nope", b"Basic cm9vdA=="])
async def test_no_known_token_is_refused_before_a_byte_of_the_body(token: bytes | None) -> None:
    headers = [(b"content-length", str(1 << 30).encode())]
    if token is not None:
        headers.append((b"authorization", token))
    client = await _call(_app(), "/v1/placements", headers, Client([b"{}"]))
    _refused(client, 401, "unauthorized")
    assert client.headers[b"www-authenticate"] == b"Bearer"
    assert client.read_first == (0, 0)


async def test_the_extender_takes_no_token_and_a_larger_limit() -> None:
    """What kube-scheduler sends for 5,000 nodes of the longest names (253 characters)
    with a large pod is read; one byte over the limit is not."""
    names = [f"{i:05d}".ljust(253, "n") for i in range(5000)]
    pod = {"metadata": {"name": "p", "annotations": {"a": "x" * 1_000_000}}}
    body = json.dumps({"Pod": pod, "NodeNames": names}).encode()
    client = Client([body[i : i + 65536] for i in range(0, len(body), 65536)])
    await _call(_app(), "/v1/extender/filter", [(b"transfer-encoding", b"chunked")], client)
    assert client.status == 200, client.sent
    assert client.body["NodeNames"] == names  # a pod that asks for no GPU passes them all
    over = [(b"content-length", str(4 * 1024 * 1024 + 1).encode())]
    client = await _call(_app(), "/v1/extender/filter", over, Client([b"{}"]))
    _refused(client, 413, "body_too_large")


def test_the_largest_legitimate_api_bodies_fit_the_default_limit() -> None:
    default = SchedulerSettings.model_fields["max_body_bytes"].default
    longest = sorted(GPU_MODEL_NAMES, key=len)[-32:]
    placement = {"job_id": "j" * 128, "namespace": "n" * 128, "gpus_per_node": 64,
                 "nodes": 1024, "models": longest, "lease_s": 2592000.0,
                 "min_gpu_memory_gib": 4096.0, "priority": -1000, "queue": True}  # fmt: skip
    cordon = {"reason": "\U0001f600" * 500}  # each escaped as 12 bytes
    for model, body in ((PlacementIn, placement), (CordonIn, cordon)):
        model.model_validate(body)
        assert len(json.dumps(body)) * 4 < default


async def test_a_body_that_trickles_past_the_deadline_is_answered_408() -> None:
    client = Client([b'{"job_id": ', None])
    headers = [*TEAM, (b"content-length", b"100")]
    await _call(_app(body_timeout_s=0.2), "/v1/placements", headers, client)
    _refused(client, 408, "body_timeout")


async def _bad(app: FastAPI, body: bytes) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        headers = {"Authorization": "Bearer a", "Content-Type": "application/json"}
        return await client.post("/v1/placements", content=body, headers=headers)


@pytest.mark.parametrize(
    ("body", "loc"),
    [
        (b'{"job_id": "%s", "gpus_per_node": 1}' % (b"j" * 40_000), ["body", "job_id"]),
        (b'{"job_id": "j", "gpus_per_node": "%s"}' % (b"7" * 40_000), ["body", "gpus_per_node"]),
        (b'{"job_id": "j", "gpus_per_node": 1, "%s": 1}' % (b"k" * 40_000), ["body", "k" * 64]),
        (b'{"job_id": "j", "gpus_per_node": 1, "models": ["%s"]}' % (b"m" * 40_000),
         ["body", "models", 0]),
        (b'{"job_id": "j", "gpus_per_node": 1%s}' % (b"0" * 100), ["body", "gpus_per_node"]),
        (b'{"job_id": "j", "gpus_per_node": NaN}', ["body", "gpus_per_node"]),
    ],
)  # fmt: skip
async def test_no_422_echoes_what_was_sent(body: bytes, loc: list[object]) -> None:
    answer = await _bad(_app(), body)
    assert answer.status_code == 422, answer.text
    assert len(answer.content) < 2048, answer.text[:300]
    errors = answer.json()["detail"]
    assert all("input" not in e and e["msg"] for e in errors)
    assert loc in [e["loc"] for e in errors]


async def _get(app: FastAPI, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return await client.get(path)


@pytest.mark.parametrize("path", ["/metrics", "/metrics/"])
async def test_metrics_answer_200_at_their_path(path: str) -> None:
    answer = await _get(_app(), path)
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert "fairlane_scheduler_placements_total" in answer.text


async def test_a_request_without_a_body_reaches_its_route_untouched() -> None:
    assert (await _get(_app(), "/healthz")).status_code == 200
    assert (await _get(_app(), "/v1/nodes")).status_code == 401  # the route's own 401


async def _chunks(body: bytes) -> AsyncIterator[bytes]:
    yield body


async def test_a_body_within_the_limits_reaches_the_route_whole() -> None:
    """Chunked, with the token: past the checks, the placement route validates it."""
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        answer = await client.post(
            "/v1/placements",
            content=_chunks(b'{"job_id": "j", "gpus_per_node": 0}'),
            headers={"Authorization": "Bearer a", "Content-Type": "application/json"},
        )
    assert answer.status_code == 422
    assert answer.json()["detail"][0]["loc"] == ["body", "gpus_per_node"]
