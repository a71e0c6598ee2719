"""The speed learner against real Kafka: jobs' progress records in, learned speeds out on
the compacted topic; a record read before its placement waits for it; a rank on a GPU
its placement does not hold is dead-lettered, and so is a record whose placement never
comes within the hold."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
from aiokafka import AIOKafkaProducer

from fairlane_events.records import GpuSpeed, JobProgress, NodeSample
from fairlane_events.topics import JOB_PROGRESS
from tests.factories import gpu_sample
from tests.scorer_harness import (
    Scorer,
    dead_letters_from,
    eventually,
    gang_placement,
    job_progress,
    now_ms,
    place,
    place_fresh_gpus,
    produce_placement,
    produce_progress,
    produce_samples,
    read_speeds,
    retire_gpus,
    run_scorer,
    score_gpus,
)

pytestmark = pytest.mark.integration

MODEL = "NVIDIA H100 80GB HBM3"
CLASS = "compute-bound"
WINDOW_MS = 60_000
#: A record waits 10 minutes (the placement events' time) for its placement: longer than
#: any placement event of these tests (or test_scorer_stream's, 8 minutes) runs ahead of
#: the wall clock, or it would expire another test's held records in its partition.
HOLD_MS = 600_000
#: Every speed that moves is published; the heartbeat scans every second.
SPEED_ENV = {
    "FAIRLANE_SPEED_EPSILON": "0",
    "FAIRLANE_SPEED_CHECK_S": "1",
    "FAIRLANE_PROGRESS_HOLD_S": str(HOLD_MS // 1000),
}


@pytest.fixture(scope="module")
def scorer(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scorer]:
    tmp = tmp_path_factory.mktemp("speeds")
    app_id = f"scorer-speeds-{time.time_ns()}"
    with run_scorer(kafka_bootstrap, app_id, tmp / "data", tmp / "scorer.log", SPEED_ENV) as s:
        yield s


@pytest.fixture
async def gpus_retired(kafka_bootstrap: str) -> AsyncIterator[list[tuple[str, list[str]]]]:
    """The (node, GPUs) a test scored, flagged stale when it ends (``retire_gpus``)."""
    nodes: list[tuple[str, list[str]]] = []
    yield nodes
    await retire_gpus(kafka_bootstrap, nodes, MODEL)


def _slow_fourth(pid: str, uuids: list[str]) -> list[JobProgress]:
    """Six minutes of a job on four GPUs whose fourth runs at 0.3 / 0.5 = 0.6x."""
    times = {u: (0.5 if u == uuids[3] else 0.3) for u in uuids}
    t0 = now_ms()
    return [job_progress(pid, t0 + i * WINDOW_MS, times) for i in range(6)]


def _assert_slow_fourth(records: list[GpuSpeed], node: str, uuids: list[str]) -> None:
    latest = {r.uuid: r for r in records}
    slow = latest[uuids[3]]
    assert set(latest) == set(uuids)
    assert slow.speed == pytest.approx(0.6, abs=0.03)
    assert slow.low < slow.speed < slow.high
    for uuid in uuids[:3]:
        assert latest[uuid].speed == pytest.approx(1.0, abs=0.03)
    assert {(s.node, s.model, s.job_class) for s in latest.values()} == {(node, MODEL, CLASS)}


async def test_a_gpu_running_at_six_tenths_is_published_near_six_tenths(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node = f"speeds-{unique}"
    pid, uuids = await place_fresh_gpus(scorer, kafka_bootstrap, node, MODEL, gpus_retired, 4)
    accepted = scorer.metric("fairlane_scorer_progress_accepted_total")
    reports = _slow_fourth(pid, uuids)
    async with read_speeds(kafka_bootstrap, node) as reader:
        await produce_progress(kafka_bootstrap, reports)
        records = await reader.until(
            lambda r: any(s.uuid == uuids[3] and s.reports == len(reports) for s in r)
        )
    _assert_slow_fourth(records, node, uuids)
    assert scorer.metric("fairlane_scorer_progress_accepted_total") - accepted == len(reports)
    assert scorer.metric("fairlane_scorer_speeds_published_total") >= len(uuids)


async def test_progress_read_before_its_placement_waits_for_it_and_is_learned(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node = f"early-{unique}"
    uuids = [f"{node}-g{i}" for i in range(4)]
    gpus_retired.append((node, uuids))
    pid = f"p-{node}"
    await score_gpus(scorer, kafka_bootstrap, node, uuids, MODEL)
    held = scorer.metric("fairlane_scorer_progress_held_total")
    reports = _slow_fourth(pid, uuids)
    # An event from the future in the partition (another test's fake clock, a skewed
    # replica) counts as now: it must not expire what is held there.
    future = gang_placement(pid, node, uuids, "pending", now_ms() + 2 * HOLD_MS)
    await produce_placement(kafka_bootstrap, future)
    async with read_speeds(kafka_bootstrap, node) as reader:
        origins = await produce_progress(kafka_bootstrap, reports)
        await eventually(
            lambda: scorer.metric("fairlane_scorer_progress_held_total") >= held + len(reports)
        )
        await place(scorer, kafka_bootstrap, pid, node, uuids)
        records = await reader.until(
            lambda r: any(s.uuid == uuids[3] and s.reports == len(reports) for s in r)
        )
    _assert_slow_fourth(records, node, uuids)
    assert await dead_letters_from(kafka_bootstrap, JOB_PROGRESS, set(origins), 3) == []


def _past_the_hold() -> int:
    """A report time whose hold has run out by now."""
    return now_ms() - HOLD_MS - 1000


async def _expire_holds(bootstrap: str, pid: str, node: str, uuids: list[str]) -> None:
    """Bring the scheduler's clock in ``pid``'s partition to now, past the hold of records
    stamped :func:`_past_the_hold`: a ``pending`` event of ``pid`` (it changes no
    allocation). An event stamped later than now would count as now."""
    await produce_placement(bootstrap, gang_placement(pid, node, uuids, "pending"))


def _rejected(scorer: Scorer, reason: str) -> float:
    return scorer.metric(f'fairlane_scorer_progress_rejected_total{{reason="{reason}"}}')


async def test_progress_naming_a_gpu_outside_its_placement_is_dead_lettered(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node = f"foreign-{unique}"
    pid, uuids = await place_fresh_gpus(scorer, kafka_bootstrap, node, MODEL, gpus_retired)
    before = {r: _rejected(scorer, r) for r in ("foreign_gpu", "unknown_placement", "invalid")}
    foreign = job_progress(pid, now_ms(), {uuids[0]: 0.3, f"{node}-elsewhere": 0.3})
    unknown = job_progress(f"p-nobody-{unique}", _past_the_hold(), dict.fromkeys(uuids, 0.3))
    origins = await produce_progress(kafka_bootstrap, [foreign, unknown])
    await _expire_holds(kafka_bootstrap, unknown.placement_id, node, uuids)
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        meta = await producer.send_and_wait(JOB_PROGRESS, b"{not json", key=pid.encode())
        origins.append((meta.partition, meta.offset))
    finally:
        await producer.stop()
    found = await dead_letters_from(kafka_bootstrap, JOB_PROGRESS, set(origins))
    letters = {(d.partition, d.offset): d for d in found}
    assert len(found) == len(letters) == len(origins)  # each once
    assert letters[origins[0]].error.startswith("foreign_gpu:")
    assert f"'{node}-elsewhere'" in letters[origins[0]].error
    assert letters[origins[1]].error.startswith("unknown_placement:")
    assert letters[origins[2]].error.startswith("invalid:")
    await eventually(lambda: _rejected(scorer, "invalid") > before["invalid"])
    assert _rejected(scorer, "foreign_gpu") == before["foreign_gpu"] + 1
    assert _rejected(scorer, "invalid") == before["invalid"] + 1
    # and more, where the topics' history left records held in the same partition
    assert _rejected(scorer, "unknown_placement") >= before["unknown_placement"] + 1


async def test_a_released_placement_vouches_only_for_windows_begun_before_its_end(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node = f"released-{unique}"
    pid, uuids = await place_fresh_gpus(scorer, kafka_bootstrap, node, MODEL, gpus_retired)
    applied = scorer.metric("fairlane_scorer_placement_events_total")
    ended_ms = now_ms() - 120_000
    await produce_placement(kafka_bootstrap, gang_placement(pid, node, uuids, "released", ended_ms))
    await eventually(lambda: scorer.metric("fairlane_scorer_placement_events_total") > applied)
    rejected = _rejected(scorer, "unknown_placement")
    accepted = scorer.metric("fairlane_scorer_progress_accepted_total")
    last = job_progress(pid, ended_ms, dict.fromkeys(uuids, 0.3))  # read after the end
    await produce_progress(kafka_bootstrap, [last])
    await eventually(lambda: scorer.metric("fairlane_scorer_progress_accepted_total") > accepted)
    late = job_progress(pid, now_ms(), dict.fromkeys(uuids, 0.3))  # began after the end
    await produce_progress(kafka_bootstrap, [late])
    await eventually(lambda: _rejected(scorer, "unknown_placement") > rejected)  # not held


async def test_a_gpu_clocked_at_half_its_peers_under_load_starts_below_them(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    """The NVML prior: the SM clock while busy against the model's fleet median. One
    report of equal times cannot tell these GPUs apart; their clocks at load can."""
    node = f"clocks-{unique}"
    uuids = [f"{node}-g{i}" for i in range(4)]
    gpus_retired.append((node, uuids))
    pid = f"p-{node}"
    mhz = {u: (735.0 if u == uuids[3] else 1470.0) for u in uuids}  # SW-power-capped H100s
    busy = [
        gpu_sample(uuid=u, index=i, model=MODEL, sm_active=1.0, gpu_util_pct=100.0, sm_clock_mhz=c)
        for i, (u, c) in enumerate(mhz.items())
    ]
    infos = scorer.metric("fairlane_scorer_speed_gpu_infos_total")
    sample = NodeSample(schema_="node-sample/1", node=node, ts_ms=now_ms(), source="sim", gpus=busy)
    await produce_samples(kafka_bootstrap, [sample])
    await eventually(lambda: scorer.metric("fairlane_scorer_speed_gpu_infos_total") >= infos + 4)
    await place(scorer, kafka_bootstrap, pid, node, uuids)
    async with read_speeds(kafka_bootstrap, node) as reader:
        await produce_progress(
            kafka_bootstrap, [job_progress(pid, now_ms(), dict.fromkeys(uuids, 0.3))]
        )
        records = await reader.until(lambda r: {s.uuid for s in r} == set(uuids))
    latest = {s.uuid: s for s in records}
    fast = [latest[u].speed for u in uuids[:3]]
    assert max(fast) - min(fast) < 0.01
    assert latest[uuids[3]].speed < min(fast) - 0.05
