"""The scheduler in the test's own process: its real lifespan (scores follower, pool,
outbox relay, housekeeping) behind httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from fairlane_scheduler.app import create_app
from fairlane_scheduler.settings import SchedulerSettings


@asynccontextmanager
async def running_scheduler(
    settings: SchedulerSettings,
) -> AsyncIterator[tuple[httpx.AsyncClient, FastAPI]]:
    app = create_app(settings)
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://t") as client,
    ):
        yield client, app


async def wait_for_node(app: FastAPI, node: str, gpus: int = 1, timeout_s: float = 30) -> None:
    """Until the fleet view holds at least ``gpus`` scores of ``node``."""
    deadline = time.monotonic() + timeout_s
    while sum(g.node == node for g in app.state.runtime.fleet.gpus.values()) < gpus:
        assert time.monotonic() < deadline, f"scores of {node} never reached the fleet view"
        await asyncio.sleep(0.2)
