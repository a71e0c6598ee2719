"""A request does not look up OpenTelemetry providers: FastAPI's native telemetry, on by
default, asks for the global tracer, meter and logger providers on every request (3-9
us each time), and the scheduler sets none (it exports Prometheus metrics)."""

from __future__ import annotations

from collections.abc import Callable

import httpx
import pytest
from fastapi import FastAPI
from opentelemetry import metrics, trace

from fairlane_scheduler.app import create_app
from fairlane_scheduler.settings import SchedulerSettings


def _lookups(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    looked: list[str] = []
    for module, name in ((trace, "get_tracer_provider"), (metrics, "get_meter_provider")):
        real: Callable[[], object] = getattr(module, name)

        def counted(real: Callable[[], object] = real, name: str = name) -> object:
            looked.append(name)
            return real()

        monkeypatch.setattr(module, name, counted)
    return looked


async def _get(app: FastAPI) -> int:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://t") as client:
        return (await client.get("/no-such-path")).status_code


async def test_a_plain_fastapi_app_looks_them_up(monkeypatch: pytest.MonkeyPatch) -> None:
    looked = _lookups(monkeypatch)
    assert await _get(FastAPI()) == 404
    assert looked  # the check below would pass for nothing without this


async def test_the_scheduler_does_not(monkeypatch: pytest.MonkeyPatch) -> None:
    settings = SchedulerSettings(
        database_url="postgresql://x@127.0.0.1:1/x",
        kafka_bootstrap_servers="127.0.0.1:1",
        admin_token="t",
    )
    app = create_app(settings)
    looked = _lookups(monkeypatch)
    assert await _get(app) == 404
    assert looked == []
