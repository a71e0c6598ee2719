"""The agent's HTTP server: /metrics in Prometheus text, /healthz from the health check."""

from __future__ import annotations

from typing import Any

import httpx
import pytest

from fairlane_agent.http import make_http_app, start_http
from fairlane_agent.metrics import AgentMetrics
from fairlane_runtime.errors import FairlaneError
from tests.processes import free_port


async def serve(alive: bool) -> tuple[str, Any, AgentMetrics]:
    metrics = AgentMetrics.create()
    metrics.dropped.labels("overflow").inc(3)
    app = make_http_app(metrics.registry, lambda: (alive, {"kafka": "unreachable", "backlog": 7}))
    port = free_port()
    runner = await start_http(app, "127.0.0.1", port)
    return f"http://127.0.0.1:{port}", runner, metrics


async def test_metrics_are_served_in_prometheus_text() -> None:
    url, runner, _ = await serve(alive=True)
    try:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{url}/metrics")
    finally:
        await runner.cleanup()
    assert answer.status_code == 200
    assert answer.headers["content-type"].startswith("text/plain")
    assert 'fairlane_agent_samples_dropped_total{reason="overflow"} 3.0' in answer.text


@pytest.mark.parametrize(("alive", "status", "word"), [(True, 200, "ok"), (False, 503, "stalled")])
async def test_healthz_follows_the_collection_loop_and_reports_kafka(
    alive: bool, status: int, word: str
) -> None:
    url, runner, _ = await serve(alive)
    try:
        async with httpx.AsyncClient() as client:
            answer = await client.get(f"{url}/healthz")
    finally:
        await runner.cleanup()
    assert answer.status_code == status
    assert answer.json() == {"status": word, "kafka": "unreachable", "backlog": 7}


async def test_a_port_in_use_is_one_clear_error() -> None:
    url, runner, metrics = await serve(alive=True)
    port = int(url.rsplit(":", 1)[1])
    try:
        with pytest.raises(FairlaneError, match=f"cannot serve /metrics on 127.0.0.1:{port}"):
            await start_http(make_http_app(metrics.registry, lambda: (True, {})), "127.0.0.1", port)
    finally:
        await runner.cleanup()
