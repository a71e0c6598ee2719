"""Learned speeds survive kill -9: the learner's state is in its changelogged tables, and
the reports read again after the restart are not learned twice.

Its own module: no other scorer may run meanwhile (every scorer learns from the shared
progress topic and publishes on the shared speeds topic)."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tests.scorer_harness import (
    job_progress,
    now_ms,
    produce_progress,
    read_speeds,
    retire_gpus,
    run_scorer,
    score_then_place,
)

pytestmark = pytest.mark.integration

MODEL = "NVIDIA H100 80GB HBM3"
SPEED_ENV = {"FAIRLANE_SPEED_EPSILON": "0", "FAIRLANE_SPEED_CHECK_S": "1"}


@pytest.fixture
async def gpus_retired(kafka_bootstrap: str) -> AsyncIterator[list[tuple[str, list[str]]]]:
    nodes: list[tuple[str, list[str]]] = []
    yield nodes
    await retire_gpus(kafka_bootstrap, nodes, MODEL)


async def test_kill_9_then_restart_keeps_what_was_learned_and_learns_nothing_twice(
    kafka_bootstrap: str, unique: str, tmp_path: Path, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node, pid = f"speedkill-{unique}", f"p-{unique}"
    uuids = [f"{node}-g{i}" for i in range(4)]
    gpus_retired.append((node, uuids))
    slow = uuids[3]
    times = {u: (0.5 if u == slow else 0.3) for u in uuids}
    t0 = now_ms()
    reports = [job_progress(pid, t0 + i * 60_000, times) for i in range(8)]
    app_id, data = f"scorer-speedkill-{unique}", tmp_path / "data"
    async with read_speeds(kafka_bootstrap, node) as reader:
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "a.log", SPEED_ENV) as first:
            await score_then_place(first, kafka_bootstrap, node, uuids, pid, MODEL)
            await produce_progress(kafka_bootstrap, reports[:4])
            await reader.until(lambda r: any(s.uuid == slow and s.reports == 4 for s in r))
            first.proc.send_signal(signal.SIGKILL)  # offsets of the last reports uncommitted
            first.proc.wait()
        await produce_progress(kafka_bootstrap, reports[4:])
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "b.log", SPEED_ENV, settle=False):
            records = await reader.until(
                lambda r: any(s.uuid == slow and s.reports == len(reports) for s in r),
                timeout_s=120,
            )
    assert max(s.reports for s in records) == len(reports)  # none learned twice
    latest = {s.uuid: s for s in records}
    assert latest[slow].speed == pytest.approx(0.6, abs=0.03)
    assert latest[slow].model == MODEL  # its row kept the model the scores named
    assert all(latest[u].speed == pytest.approx(1.0, abs=0.03) for u in uuids[:3])
