"""With its own port, the extender answers only there and the API only on the main port:
what a NetworkPolicy (ports, not paths) needs to admit only the control plane."""

from __future__ import annotations

from typing import cast

import httpx
import pytest
from fastapi import FastAPI

from fairlane_scheduler.api.listeners import ExtenderPortGate
from fairlane_scheduler.app import create_app
from fairlane_scheduler.settings import SchedulerSettings


def _app() -> FastAPI:
    app = FastAPI()

    @app.get("/healthz")
    @app.get("/v1/placements")
    @app.post("/v1/extender/filter")
    async def ok() -> str:
        return "ok"

    app.add_middleware(ExtenderPortGate, extender_port=8081)
    return app


@pytest.mark.parametrize(
    ("port", "method", "path", "status"),
    [
        (8080, "GET", "/v1/placements", 200),
        (8080, "POST", "/v1/extender/filter", 404),
        (8081, "POST", "/v1/extender/filter", 200),
        (8081, "GET", "/v1/placements", 404),
        (8080, "GET", "/healthz", 200),
        (8081, "GET", "/healthz", 200),
    ],
)
async def test_each_port_serves_its_own_routes(
    port: int, method: str, path: str, status: int
) -> None:
    transport = httpx.ASGITransport(app=_app())
    async with httpx.AsyncClient(transport=transport, base_url=f"http://t:{port}") as client:
        answer = await client.request(method, path)
    assert answer.status_code == status
    if status == 404:
        assert answer.json()["error"] == "not_found"


def test_the_scheduler_installs_the_gate_only_with_an_extender_port() -> None:
    def gated(settings: SchedulerSettings) -> bool:
        return any(
            cast(object, m.cls) is ExtenderPortGate for m in create_app(settings).user_middleware
        )

    assert gated(SchedulerSettings(auth_disabled=True, extender_port=8081))
    assert not gated(SchedulerSettings(auth_disabled=True))


def test_the_extender_port_must_differ_from_the_api_port() -> None:
    with pytest.raises(ValueError, match="extender_port must differ"):
        SchedulerSettings(auth_disabled=True, port=8080, extender_port=8080)
