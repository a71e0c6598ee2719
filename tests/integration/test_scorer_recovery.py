"""Scores survive kill -9 and are shared by two workers: every record equals the reference.

The stream is seeded: nodes with two GPUs each, 30 s apart in event time, with spikes and
throttling. With ``emit_epsilon = 0`` every score change is published, so each record can
be checked against the reference score of its GPU's history up to its ``ts_ms``.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import signal
import threading
import time
from collections import defaultdict
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
from aiokafka import AIOKafkaConsumer, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient
from aiokafka.errors import KafkaError
from aiokafka.structs import OffsetAndMetadata

from fairlane_events.records import GpuSample, GpuScore, NodeSample
from fairlane_events.topics import NODE_SAMPLES, STREAM_PARTITIONS
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import reference_score
from tests.factories import gpu_sample, gpu_score
from tests.scheduler_harness import publish
from tests.scorer_harness import Scorer, eventually, produce_samples, read_scores, run_scorer

pytestmark = pytest.mark.integration

NODES, ROUNDS, STEP_MS = 6, 24, 30_000
CONFIG = ScoreConfig()  # the scorer's defaults


@pytest.fixture
async def retired(kafka_bootstrap: str) -> AsyncIterator[list[list[NodeSample]]]:
    """The streams a test sends. When it ends, their GPUs are flagged stale on the
    shared scores topic: their event times run ahead of the wall clock, so their scores
    would stay fresh for the tests after it, and a scheduler there would place on them
    (the live evaluation refuses to run beside a foreign fleet)."""
    streams: list[list[NodeSample]] = []
    yield streams
    last = {g.uuid: (s, g) for stream in streams for s in stream for g in s.gpus}
    await publish(
        kafka_bootstrap,
        [
            gpu_score(
                node=s.node,
                uuid=g.uuid,
                index=g.index,
                model=g.model,
                stale=True,
                ts_ms=s.ts_ms + 1,
            )
            for s, g in last.values()
        ],
    )


def seeded_stream(
    prefix: str, seed: int, count: int = ROUNDS, step_ms: int = STEP_MS
) -> list[NodeSample]:
    rng = np.random.default_rng(seed)
    t0 = int(time.time() * 1000)  # event time runs ahead of the wall clock: never stale
    rounds = []
    for r in range(count):
        for n in range(NODES):
            gpus = [_random_gpu(rng, f"{prefix}-n{n}-g{i}", i) for i in range(2)]
            rounds.append(
                NodeSample(
                    schema_="node-sample/1",
                    node=f"{prefix}-n{n}",
                    ts_ms=t0 + r * step_ms,
                    source="sim",
                    gpus=gpus,
                )
            )
    return rounds


def _random_gpu(rng: np.random.Generator, uuid: str, index: int) -> GpuSample:
    load = float(rng.choice([0.0, 0.1, 1.0], p=[0.6, 0.3, 0.1]))  # 1.0: a spike
    throttled = rng.random() < 0.2
    return gpu_sample(
        uuid=uuid,
        index=index,
        sm_active=load,
        gpu_util_pct=100 * load,
        mem_util_pct=float(rng.uniform(0, 30)),
        temp_c=float(rng.uniform(40, 88)),
        sm_clock_mhz=1200.0 if throttled else 1980.0,
        clock_event_reasons=0x40 if throttled else 0,
    )


def assert_all_equal_reference(stream: list[NodeSample], scores: list[GpuScore]) -> None:
    history: dict[str, list[tuple[int, GpuSample]]] = defaultdict(list)
    for s in stream:
        for g in s.gpus:
            history[g.uuid].append((s.ts_ms, g))
    assert scores
    for record in scores:
        upto = [(ts, g) for ts, g in history[record.uuid] if ts <= record.ts_ms]
        want = reference_score(upto, record.ts_ms, CONFIG)
        assert math.isclose(record.score, want.score, abs_tol=1e-9), (
            f"{record.uuid}@{record.ts_ms}: {record.score} {record.components} "
            f"!= {want.score} {dict(want.components)} n={len(upto)} "
            f"in window {record.samples_in_window} vs {want.samples_in_window}"
        )


def last_rounds_seen(stream: list[NodeSample]) -> object:
    last_ts = stream[-1].ts_ms
    uuids = {g.uuid for s in stream for g in s.gpus}

    def done(records: list[GpuScore]) -> bool:
        return {r.uuid for r in records if r.ts_ms == last_ts} == uuids

    return done


async def test_kill_9_mid_stream_then_restart_gives_the_uninterrupted_scores(
    kafka_bootstrap: str, unique: str, tmp_path: Path, retired: list[list[NodeSample]]
) -> None:
    prefix = f"kill-{unique}"
    stream = seeded_stream(prefix, seed=7)
    retired.append(stream)
    half = len(stream) // 2
    app_id, data = f"scorer-kill-{unique}", tmp_path / "data"
    async with read_scores(kafka_bootstrap, prefix) as reader:
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "a.log") as first:
            await produce_samples(kafka_bootstrap, stream[:half])
            await reader.until(lambda r: len(r) >= half)  # mid-stream, state in flight
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait()
        await produce_samples(kafka_bootstrap, stream[half:])
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "b.log"):
            scores = await reader.until(last_rounds_seen(stream), timeout_s=90)  # type: ignore[arg-type]
    assert_all_equal_reference(stream, scores)


async def _end_offsets(bootstrap: str) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        parts = [TopicPartition(NODE_SAMPLES, p) for p in range(STREAM_PARTITIONS)]
        return dict(await consumer.end_offsets(parts))
    finally:
        await consumer.stop()


async def _committed(bootstrap: str, group: str) -> int:
    """How many records of the node-samples topic ``group`` has committed, in all."""
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    try:
        offsets = await admin.list_consumer_group_offsets(group)
    finally:
        await admin.close()
    return sum(o.offset for tp, o in offsets.items() if tp.topic == NODE_SAMPLES)


async def _commit_as(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Commit ``offsets`` for ``group`` once its dead member's session has expired."""
    deadline = time.monotonic() + 60
    while True:
        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
        )
        await consumer.start()
        try:
            consumer.assign(list(offsets))
            await consumer.commit({tp: OffsetAndMetadata(o, "") for tp, o in offsets.items()})
            return
        except KafkaError:
            if time.monotonic() > deadline:
                raise
        finally:
            await consumer.stop()
        await asyncio.sleep(1)


async def test_records_replayed_over_rows_that_hold_them_count_once(
    kafka_bootstrap: str, unique: str, tmp_path: Path, retired: list[list[NodeSample]]
) -> None:
    """A kill -9 after a batch's rows reached the changelog and before its offsets were
    committed, at its worst: once the first half is in the changelog (committed), the
    commits are put back to before it, so the restarted worker reads every record of it
    again over rows that already hold it. Not one is counted twice: each is ignored as
    not newer than its GPU's last sample, and the scores equal the reference."""
    prefix = f"replay-{unique}"
    # Rounds 20 s apart: every record of the first half is within the scorer's replay
    # tolerance (300 s) of its node's newest, a redelivery, not a replay (dead-lettered).
    stream = seeded_stream(prefix, seed=9, step_ms=20_000)
    retired.append(stream)
    half = len(stream) // 2
    app_id, data = f"scorer-replay-{unique}", tmp_path / "data"
    env = {"FAIRLANE_SESSION_TIMEOUT_S": "6"}
    before = await _end_offsets(kafka_bootstrap)
    async with read_scores(kafka_bootstrap, prefix) as reader:
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "a.log", env) as first:
            await produce_samples(kafka_bootstrap, stream[:half])
            await reader.until(last_rounds_seen(stream[:half]))  # type: ignore[arg-type]
            everything = sum((await _end_offsets(kafka_bootstrap)).values())
            deadline = time.monotonic() + 60
            while await _committed(kafka_bootstrap, app_id) < everything:  # rows are in
                assert time.monotonic() < deadline, "the first half was never committed"
                await asyncio.sleep(0.5)
            first.proc.send_signal(signal.SIGKILL)
            first.proc.wait()
        await _commit_as(kafka_bootstrap, app_id, before)
        await produce_samples(kafka_bootstrap, stream[half:])
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "b.log", env) as second:
            scores = await reader.until(last_rounds_seen(stream), timeout_s=90)  # type: ignore[arg-type]
            replayed = second.metric("fairlane_scorer_duplicates_ignored_total")
    assert replayed >= half * 2  # every GPU sample of the first half: held, ignored
    assert_all_equal_reference(stream, scores)


def _owned(scorer: Scorer) -> float:
    return scorer.metric("fairlane_scorer_assigned_partitions")


class PacedProducer:
    """Produces the rounds of a stream in a thread, one every ``pause_s``, until told to
    stop: the records flow through every rebalance the test causes."""

    def __init__(self, bootstrap: str, stream: list[NodeSample], pause_s: float) -> None:
        self.bootstrap, self.stream, self.pause_s = bootstrap, stream, pause_s
        self.sent = 0
        self.stop_after: int | None = None
        self._thread = threading.Thread(target=lambda: asyncio.run(self._run()), daemon=True)

    def start(self) -> None:
        self._thread.start()

    def finish(self, more_rounds: int) -> list[NodeSample]:
        """Send ``more_rounds`` more rounds, then stop; what was sent."""
        self.stop_after = min(len(self.stream), self.sent + more_rounds * NODES)
        self._thread.join(timeout=120)
        assert not self._thread.is_alive()
        return self.stream[: self.sent]

    async def _run(self) -> None:
        for first in range(0, len(self.stream), NODES):
            if self.stop_after is not None and self.sent >= self.stop_after:
                return
            await produce_samples(self.bootstrap, self.stream[first : first + NODES])
            self.sent = first + NODES
            await asyncio.sleep(self.pause_s)


async def test_a_worker_joins_and_one_is_killed_while_records_flow(
    kafka_bootstrap: str, unique: str, tmp_path: Path, retired: list[list[NodeSample]]
) -> None:
    """Scale-out and failover under load: a second worker joins the group and then the
    first is SIGKILLed, records flowing all the while; the survivor takes the dead one's
    partitions over from the changelog, and every score either published equals the
    reference for its GPU's history (no sample lost or counted twice)."""
    prefix = f"pair-{unique}"
    stream = seeded_stream(prefix, seed=8, count=2000)  # more than is ever sent
    retired.append(stream)
    app_id = f"scorer-pair-{unique}"
    env = {"FAIRLANE_SESSION_TIMEOUT_S": "8"}
    producer = PacedProducer(kafka_bootstrap, stream, pause_s=0.25)
    async with read_scores(kafka_bootstrap, prefix) as reader:
        with contextlib.ExitStack() as workers:
            a = workers.enter_context(
                run_scorer(kafka_bootstrap, app_id, tmp_path / "a", tmp_path / "a.log", env)
            )
            producer.start()
            await eventually(lambda: a.metric("fairlane_scorer_gpu_samples_scored_total") > 0)
            b = await asyncio.to_thread(
                workers.enter_context,
                run_scorer(
                    kafka_bootstrap, app_id, tmp_path / "b", tmp_path / "b.log", env, settle=False
                ),
            )
            await eventually(
                lambda: _owned(a) > 0 < _owned(b) and _owned(a) + _owned(b) == STREAM_PARTITIONS,
                timeout_s=90,
            )
            scored_by_b = b.metric("fairlane_scorer_gpu_samples_scored_total")
            await eventually(
                lambda: b.metric("fairlane_scorer_gpu_samples_scored_total") > scored_by_b
            )
            a.proc.send_signal(signal.SIGKILL)  # mid-stream, batches in flight
            a.proc.wait()
            at_kill = producer.sent
            await eventually(lambda: _owned(b) == STREAM_PARTITIONS, timeout_s=90)
            sent = await asyncio.to_thread(producer.finish, 10)
            scores = await reader.until(last_rounds_seen(sent), timeout_s=120)  # type: ignore[arg-type]
    assert len(sent) > at_kill  # records kept flowing after the kill
    assert_all_equal_reference(sent, scores)
