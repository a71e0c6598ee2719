"""Idle holdings through the whole live pipeline (issue 29 item 3): the simulated agent
loads a fractional placement's GPU by its tiny share, the scorer publishes that GPU's
activity beside its masked components, and the scheduler announces the placement in one
``idle`` event on ``fairlane.placements.v1``; a whole placement that computes is not."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.integration.test_scheduler_learned_speed import events_of
from tests.live_stack import LiveStack, live_stack

pytestmark = pytest.mark.e2e

MODEL = "P100"  # no other end-to-end or integration test's fleet has it
SCENARIO = f"""
name = "idle"

[fleet]
nodes = 1
gpus_per_node = 2
models = ["{MODEL}"]
degraded_fraction = 0.0
"""
IDLE_WINDOW_S = 10


@pytest.fixture
def stack(
    kafka_bootstrap: str, database_url: str, tmp_path: Path, unique: str
) -> Iterator[LiveStack]:
    settings = {"FAIRLANE_IDLE_WINDOW_S": str(IDLE_WINDOW_S), "FAIRLANE_IDLE_CHECK_S": "1"}
    with live_stack(
        kafka_bootstrap,
        database_url,
        tmp_path,
        f"idle-{unique}",
        SCENARIO,
        scheduler_settings=settings,
    ) as s:
        yield s


def place(stack: LiveStack, body: dict[str, Any]) -> str:
    headers = {"Authorization": f"Bearer {stack.token}"}
    answer = httpx.post(f"{stack.url}/v1/placements", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    return str(answer.json()["id"])


def kinds(bootstrap: str, placement_id: str) -> list[str]:
    return [e.event for e in asyncio.run(events_of(bootstrap, placement_id))]


def test_a_placement_that_leaves_its_gpu_idle_is_announced_through_the_pipeline(
    stack: LiveStack, kafka_bootstrap: str
) -> None:
    common = {"models": [MODEL], "lease_s": 600}
    stack.wait_for_free_gpus(2)
    tiny = place(stack, {"job_id": "tiny", "gpus_per_node": 1, "gpu_share": 0.01, **common})
    busy = place(stack, {"job_id": "busy", "gpus_per_node": 1, **common})
    deadline = time.monotonic() + 90
    while "idle" not in kinds(kafka_bootstrap, tiny):
        assert time.monotonic() < deadline, "no idle event for the placement at 1 % of a GPU"
        time.sleep(2)
    time.sleep(3)  # three more idle checks
    assert kinds(kafka_bootstrap, tiny) == ["created", "idle"]
    assert kinds(kafka_bootstrap, busy) == ["created"]  # it computes: never idle
    metrics = httpx.get(f"{stack.url}/metrics").text
    assert "fairlane_scheduler_idle_placements 1.0" in metrics
    assert "fairlane_scheduler_idle_events_total 1.0" in metrics
