"""The scheduler in the test's own process: its real lifespan (scores follower, pool,
outbox relay, housekeeping) behind httpx's ASGI transport."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Any

import httpx
from aiokafka import AIOKafkaProducer
from fastapi import FastAPI

from fairlane_events.codec import encode
from fairlane_events.records import GpuScore, GpuSpeed
from fairlane_events.topics import GPU_SCORES, GPU_SPEEDS
from fairlane_scheduler.app import create_app
from fairlane_scheduler.settings import SchedulerSettings
from tests.factories import GIB, gpu_score


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


def node_scores(
    node: str, gpus: Sequence[tuple[str, float, float]], *, speed: float, **extra: Any
) -> list[GpuScore]:
    """A score record per GPU of ``node``, given as (model, score, memory GiB); index =
    position, uuid ``GPU-<node>-<index>``, effective capacity = score x ``speed``."""
    return [
        gpu_score(
            node=node,
            uuid=f"GPU-{node}-{i}",
            index=i,
            model=model,
            score=score,
            speed=speed,
            effective_capacity=score * speed,
            mem_total_bytes=int(mem_gib * GIB),
            **extra,
        )
        for i, (model, score, mem_gib) in enumerate(gpus)
    ]


def _topic_and_key(record: GpuScore | GpuSpeed) -> tuple[str, bytes]:
    if isinstance(record, GpuScore):
        return GPU_SCORES, record.uuid.encode()
    return GPU_SPEEDS, f"{record.uuid}/{record.job_class}".encode()


def gone_stale(scores: Iterable[GpuScore]) -> list[GpuScore]:
    """The same GPUs' records, stale and stamped now: what a test publishes when it is
    done with its nodes, so that the later tests' schedulers (which keep scores fresh for
    long) never place on them."""
    now = int(time.time() * 1000)
    return [s.model_copy(update={"stale": True, "ts_ms": now}) for s in scores]


async def publish(bootstrap: str, records: Iterable[GpuScore | GpuSpeed]) -> None:
    """Scores onto the scores topic keyed by uuid, learned speeds onto theirs keyed by
    uuid/class: sent together, then every send awaited."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5)
    await producer.start()
    try:
        sent = []
        for record in records:
            topic, key = _topic_and_key(record)
            sent.append(await producer.send(topic, encode(record), key=key))
        for delivery in sent:
            await delivery
    finally:
        await producer.stop()


async def send_raw(bootstrap: str, topic: str, value: bytes | None, key: bytes) -> None:
    """One record of any bytes (a bad one, say; None: a tombstone) onto ``topic``,
    acknowledged."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        await producer.send_and_wait(topic, value, key=key)
    finally:
        await producer.stop()
