"""The speed learner against real Kafka: jobs' progress records in, learned speeds out on
the compacted topic; a rank on a GPU its placement does not hold is dead-lettered."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from fairlane_events.codec import decode
from fairlane_events.records import DeadLetter, GpuSpeed
from fairlane_events.topics import DEAD_LETTER, JOB_PROGRESS
from tests.scorer_harness import (
    Scorer,
    eventually,
    gang_placement,
    job_progress,
    now_ms,
    produce_placement,
    produce_progress,
    read_speeds,
    retire_gpus,
    run_scorer,
    score_then_place,
)

pytestmark = pytest.mark.integration

MODEL = "NVIDIA H100 80GB HBM3"
CLASS = "compute-bound"
WINDOW_MS = 60_000
#: Every speed that moves is published; the heartbeat scans every second.
SPEED_ENV = {"FAIRLANE_SPEED_EPSILON": "0", "FAIRLANE_SPEED_CHECK_S": "1"}


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


def _latest(records: list[GpuSpeed]) -> dict[str, GpuSpeed]:
    return {r.uuid: r for r in records}


async def test_a_gpu_running_at_six_tenths_is_published_near_six_tenths(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node = f"speeds-{unique}"
    uuids = [f"{node}-g{i}" for i in range(4)]
    gpus_retired.append((node, uuids))
    slow = uuids[3]
    await score_then_place(scorer, kafka_bootstrap, node, uuids, f"p-{unique}", MODEL)
    accepted = scorer.metric("fairlane_scorer_progress_accepted_total")
    t0 = now_ms()
    times = {u: (0.5 if u == slow else 0.3) for u in uuids}  # the slow GPU: 0.3 / 0.5 = 0.6x
    reports = [job_progress(f"p-{unique}", t0 + i * WINDOW_MS, times) for i in range(6)]
    async with read_speeds(kafka_bootstrap, node) as reader:
        await produce_progress(kafka_bootstrap, reports)
        records = await reader.until(
            lambda r: any(s.uuid == slow and s.reports == len(reports) for s in r)
        )
    latest = _latest(records)
    assert set(latest) == set(uuids)
    assert latest[slow].speed == pytest.approx(0.6, abs=0.03)
    assert latest[slow].low < latest[slow].speed < latest[slow].high
    for uuid in uuids[:3]:
        assert latest[uuid].speed == pytest.approx(1.0, abs=0.03)
    assert {(s.node, s.model, s.job_class) for s in latest.values()} == {(node, MODEL, CLASS)}
    assert scorer.metric("fairlane_scorer_progress_accepted_total") - accepted == len(reports)
    assert scorer.metric("fairlane_scorer_speeds_published_total") >= len(uuids)


async def _dead_letters_from(bootstrap: str, origins: set[tuple[int, int]]) -> list[DeadLetter]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    found: list[DeadLetter] = []
    try:
        consumer.assign([TopicPartition(DEAD_LETTER, 0)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + 30
        while len(found) < len(origins) and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for m in messages:
                    d = decode(DeadLetter, m.value)
                    if d.source_topic == JOB_PROGRESS and (d.partition, d.offset) in origins:
                        found.append(d)
    finally:
        await consumer.stop()
    return found


def _rejected(scorer: Scorer, reason: str) -> float:
    return scorer.metric(f'fairlane_scorer_progress_rejected_total{{reason="{reason}"}}')


async def test_progress_naming_a_gpu_outside_its_placement_is_dead_lettered(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node = f"foreign-{unique}"
    uuids = [f"{node}-g{i}" for i in range(2)]
    gpus_retired.append((node, uuids))
    pid = f"p-{unique}"
    await score_then_place(scorer, kafka_bootstrap, node, uuids, pid, MODEL)
    before = {r: _rejected(scorer, r) for r in ("foreign_gpu", "unknown_placement", "invalid")}
    ts = now_ms()
    foreign = job_progress(pid, ts, {uuids[0]: 0.3, f"{node}-elsewhere": 0.3})
    unknown = job_progress(f"p-nobody-{unique}", ts, dict.fromkeys(uuids, 0.3))
    origins = await produce_progress(kafka_bootstrap, [foreign, unknown])
    producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap, acks="all")
    await producer.start()
    try:
        meta = await producer.send_and_wait(JOB_PROGRESS, b"{not json", key=pid.encode())
        origins.append((meta.partition, meta.offset))
    finally:
        await producer.stop()
    letters = {
        (d.partition, d.offset): d for d in await _dead_letters_from(kafka_bootstrap, set(origins))
    }
    assert set(letters) == set(origins)
    assert letters[origins[0]].error.startswith("foreign_gpu:")
    assert f"'{node}-elsewhere'" in letters[origins[0]].error
    assert letters[origins[1]].error.startswith("unknown_placement:")
    assert letters[origins[2]].error.startswith("invalid:")
    await eventually(lambda: _rejected(scorer, "invalid") > before["invalid"])
    for reason, count in before.items():
        assert _rejected(scorer, reason) == count + 1, reason


async def test_a_released_placement_takes_its_gpus_with_it(
    scorer: Scorer, kafka_bootstrap: str, unique: str, gpus_retired: list[tuple[str, list[str]]]
) -> None:
    node = f"released-{unique}"
    uuids = [f"{node}-g{i}" for i in range(2)]
    gpus_retired.append((node, uuids))
    pid = f"p-{unique}"
    await score_then_place(scorer, kafka_bootstrap, node, uuids, pid, MODEL)
    applied = scorer.metric("fairlane_scorer_placement_events_total")
    await produce_placement(kafka_bootstrap, gang_placement(pid, node, uuids, "released"))
    await eventually(lambda: scorer.metric("fairlane_scorer_placement_events_total") > applied)
    before = _rejected(scorer, "unknown_placement")
    await produce_progress(
        kafka_bootstrap, [job_progress(pid, now_ms(), dict.fromkeys(uuids, 0.3))]
    )
    await eventually(lambda: _rejected(scorer, "unknown_placement") > before)
