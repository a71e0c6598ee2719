"""Learned speeds survive kill -9: the learner's state is in its changelogged tables, and
the reports read again after the restart are not learned twice; progress records held
for their placement survive it too. A new consumer group that reads a backlog of both
topics learns from records produced before their placement, and from those produced
before it ended but read after its end. A GPU gone from the fleet
is forgotten (tombstoned) once its retention passed.

Its own module: no other scorer may run meanwhile (every scorer learns from the shared
progress topic and publishes on the shared speeds topic)."""

from __future__ import annotations

import signal
from collections.abc import AsyncIterator, Callable
from pathlib import Path

import pytest

from fairlane_events.records import GpuSpeed, JobProgress
from fairlane_events.topics import JOB_PROGRESS
from tests.scorer_harness import (
    dead_letters_from,
    eventually,
    gang_placement,
    idle_sample,
    job_progress,
    now_ms,
    place_fresh_gpus,
    produce_placement,
    produce_progress,
    produce_samples,
    read_speeds,
    retire_gpus,
    run_scorer,
    score_gpus,
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


def _gpus(node: str, retired: list[tuple[str, list[str]]]) -> tuple[str, list[str]]:
    """Four new GPUs of ``node`` (retired when the test ends) and their placement's id."""
    uuids = [f"{node}-g{i}" for i in range(4)]
    retired.append((node, uuids))
    return f"p-{node}", uuids


def _reports(pid: str, uuids: list[str], t0: int, count: int) -> list[JobProgress]:
    """``count`` minutes of a job on four GPUs whose fourth runs at 0.3 / 0.5 = 0.6x."""
    times = {u: (0.5 if u == uuids[3] else 0.3) for u in uuids}
    return [job_progress(pid, t0 + i * 60_000, times) for i in range(count)]


def _learned_all(uuid: str, reports: int) -> Callable[[list[GpuSpeed]], bool]:
    return lambda records: any(s.uuid == uuid and s.reports == reports for s in records)


def _assert_fourth_slow(records: list[GpuSpeed], uuids: list[str], reports: int) -> None:
    latest = {s.uuid: s for s in records if s.uuid in uuids}
    assert max(s.reports for s in latest.values()) == reports  # none learned twice
    assert latest[uuids[3]].speed == pytest.approx(0.6, abs=0.03)
    assert latest[uuids[3]].model == MODEL  # its row kept the model the scores named
    assert all(latest[u].speed == pytest.approx(1.0, abs=0.03) for u in uuids[:3])


async def test_kill_9_then_restart_keeps_what_was_learned_and_what_was_held(
    kafka_bootstrap: str, unique: str, tmp_path: Path, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node, early_node = f"speedkill-{unique}", f"heldkill-{unique}"
    pid, uuids = _gpus(node, gpus_retired)
    early_pid, early = _gpus(early_node, gpus_retired)
    placed, held = _reports(pid, uuids, now_ms(), 8), _reports(early_pid, early, now_ms(), 8)
    app_id, data = f"scorer-speedkill-{unique}", tmp_path / "data"
    async with read_speeds(kafka_bootstrap, "") as reader:
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "a.log", SPEED_ENV) as first:
            await score_then_place(first, kafka_bootstrap, node, uuids, pid, MODEL)
            await score_gpus(first, kafka_bootstrap, early_node, early, MODEL)
            before = first.metric("fairlane_scorer_progress_held_total")
            held_at = await produce_progress(kafka_bootstrap, held)  # no placement yet
            await produce_progress(kafka_bootstrap, placed[:4])
            await reader.until(_learned_all(uuids[3], 4))
            await eventually(
                lambda: first.metric("fairlane_scorer_progress_held_total") >= before + len(held)
            )
            first.proc.send_signal(signal.SIGKILL)  # offsets of the last reports uncommitted
            first.proc.wait()
        await produce_progress(kafka_bootstrap, placed[4:])
        await produce_placement(kafka_bootstrap, gang_placement(early_pid, early_node, early))
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "b.log", SPEED_ENV, settle=False):
            await reader.until(_learned_all(uuids[3], len(placed)), timeout_s=120)
            records = await reader.until(_learned_all(early[3], len(held)))
    _assert_fourth_slow(records, uuids, len(placed))
    _assert_fourth_slow(records, early, len(held))
    assert await dead_letters_from(kafka_bootstrap, JOB_PROGRESS, set(held_at), 3) == []


async def test_a_new_group_reading_progress_around_its_placements_events_learns_it(
    kafka_bootstrap: str, unique: str, tmp_path: Path, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    """The backlog: samples, then progress, then the placement and its end, all produced
    before the worker starts; whichever topic it reads first (the reports before the
    placement's start, or after its end), the reports are learned, and none is
    dead-lettered."""
    node = f"backlog-{unique}"
    pid, uuids = _gpus(node, gpus_retired)
    await produce_samples(kafka_bootstrap, [idle_sample(node, uuids, MODEL)])
    reports = _reports(pid, uuids, now_ms(), 6)
    origins = await produce_progress(kafka_bootstrap, reports)
    await produce_placement(kafka_bootstrap, gang_placement(pid, node, uuids))
    end_ms = reports[-1].ts_ms  # the last window began a minute before the end
    await produce_placement(kafka_bootstrap, gang_placement(pid, node, uuids, "released", end_ms))
    app_id, log = f"scorer-backlog-{unique}", tmp_path / "s.log"
    async with read_speeds(kafka_bootstrap, node) as reader:
        with run_scorer(kafka_bootstrap, app_id, tmp_path / "data", log, SPEED_ENV, settle=False):
            # Read in whatever order, the reports may be learned before the scores name
            # the GPUs' model: their rows take it when the scores do.
            records = await reader.until(
                lambda r: (
                    {s.uuid for s in r if s.model == MODEL and s.reports == len(reports)}
                    == set(uuids)
                ),
                timeout_s=120,
            )
    _assert_fourth_slow(records, uuids, len(reports))
    assert await dead_letters_from(kafka_bootstrap, JOB_PROGRESS, set(origins), 3) == []


async def test_a_gpu_gone_from_the_fleet_is_tombstoned_once_its_retention_passed(
    kafka_bootstrap: str, unique: str, tmp_path: Path, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    """Its own worker: with a retention of seconds, the learner forgets every GPU the
    topics' history holds, and its clock is the newest time that history tells of."""
    retention_ms = 20_000
    env = {**SPEED_ENV, "FAIRLANE_SPEED_RETENTION_S": str(retention_ms // 1000)}
    app_id, log = f"scorer-retention-{unique}", tmp_path / "s.log"
    with run_scorer(kafka_bootstrap, app_id, tmp_path / "data", log, env) as scorer:
        node = f"gone-{unique}"
        gone_pid, gone = await place_fresh_gpus(scorer, kafka_bootstrap, node, MODEL, gpus_retired)
        alive_pid, alive = await place_fresh_gpus(
            scorer, kafka_bootstrap, f"alive-{unique}", MODEL, gpus_retired
        )
        forgotten = scorer.metric("fairlane_scorer_speeds_forgotten_total")
        keys = {f"{u}/compute-bound".encode() for u in gone}
        # after everything the learner has read: its own clock, or the wall clock
        ts = max(now_ms(), int(scorer.metric("fairlane_scorer_learner_time_ms"))) + 1000
        async with read_speeds(kafka_bootstrap, node) as reader:
            await produce_progress(
                kafka_bootstrap, [job_progress(gone_pid, ts, dict.fromkeys(gone, 0.3))]
            )
            await reader.until(lambda r: {s.uuid for s in r} == set(gone))
            assert keys.isdisjoint(reader.tombstones)
            # the fleet's time moves on past the retention: only the other GPUs report
            later = job_progress(alive_pid, ts + retention_ms + 5000, dict.fromkeys(alive, 0.3))
            await produce_progress(kafka_bootstrap, [later])
            await reader.until(lambda _: keys <= set(reader.tombstones))
        assert not any(f"{u}/compute-bound".encode() in reader.tombstones for u in alive)
        assert scorer.metric("fairlane_scorer_speeds_forgotten_total") - forgotten >= len(gone)
