"""The agent's one small HTTP server: ``/metrics`` (Prometheus) and ``/healthz``.

Liveness means "the collection loop is turning", not "Kafka is up": during a broker
outage the agent is doing its job (buffering), and restarting it would lose the backlog.
The body says whether Kafka is reachable and how much is waiting.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from fairlane_agent.errors import HttpServeError

__all__ = ["HealthCheck", "make_http_app", "start_http"]

#: ``health()`` -> (alive, details for the body)
HealthCheck = Callable[[], tuple[bool, dict[str, Any]]]


def make_http_app(registry: CollectorRegistry, health: HealthCheck) -> web.Application:
    async def metrics(_: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def healthz(_: web.Request) -> web.Response:
        alive, details = health()
        return web.json_response(
            {"status": "ok" if alive else "stalled", **details}, status=200 if alive else 503
        )

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/healthz", healthz)
    return app


async def start_http(app: web.Application, host: str, port: int) -> web.AppRunner:
    """Serve ``app``; the caller awaits ``runner.cleanup()`` on shutdown."""
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, host, port).start()
    except OSError as exc:
        await runner.cleanup()
        raise HttpServeError(f"cannot serve /metrics on {host}:{port}: {exc.strerror}") from exc
    return runner
