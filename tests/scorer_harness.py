"""Drive the scorer as a real process against real Kafka: produce, run, read the scores."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import subprocess
import time
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Generic, TypeVar

import httpx
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from fairlane_events.codec import decode, encode
from fairlane_events.records import (
    DeadLetter,
    GpuScore,
    GpuSlot,
    GpuSpeed,
    JobProgress,
    NodeAssignment,
    NodeSample,
    PlacementEvent,
    RankProgress,
)
from fairlane_events.topics import (
    DEAD_LETTER,
    GPU_SCORES,
    GPU_SPEEDS,
    JOB_PROGRESS,
    NODE_SAMPLES,
    PLACEMENTS,
    STREAM_PARTITIONS,
)
from tests.factories import gpu_sample, gpu_score
from tests.node_keys import SIGNING_ENV, signed
from tests.processes import free_port, service, wait_for_http
from tests.scheduler_harness import publish

#: Test settings: every score change is published, the staleness scan runs every second.
#: The tests' streams run event time ahead of the wall clock on purpose, so that their
#: GPUs never go stale mid-test: up to ~18 minutes (test_scorer_stream: 35 rounds of
#: 30 s); the scorer's bound on samples from the future (120 s) would refuse them. A
#: test of that bound sets its own (tests/integration/test_scorer_identity.py).
SCORER_ENV = {
    "FAIRLANE_EMIT_EPSILON": "0",
    "FAIRLANE_STALE_CHECK_S": "1",
    "FAIRLANE_MAX_FUTURE_SKEW_S": "3600",
    **SIGNING_ENV,
}


@dataclass
class Scorer:
    url: str
    proc: subprocess.Popen[bytes]
    log: Path

    def metric(self, name: str) -> float:
        for line in httpx.get(f"{self.url}/metrics", timeout=5).text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
        raise AssertionError(f"{name} not in /metrics")

    def settle(self, quiet_s: float = 2.0, timeout_s: float = 180) -> None:
        """Wait until the worker has read the backlog earlier tests left on the shared
        topics (its input counters stop moving), so a test's own records are what moves
        them next."""
        counters = (
            "fairlane_scorer_records_in_total",
            "fairlane_scorer_placement_events_total",
            "fairlane_scorer_progress_records_in_total",
        )
        deadline = time.monotonic() + timeout_s
        last, quiet_since = None, time.monotonic()
        while time.monotonic() < deadline:
            with contextlib.suppress(httpx.HTTPError):
                now = tuple(self.metric(c) for c in counters)
                if now != last:
                    last, quiet_since = now, time.monotonic()
                elif time.monotonic() - quiet_since >= quiet_s:
                    return
            time.sleep(0.25)
        raise AssertionError(f"scorer still reading its backlog after {timeout_s}s")


@contextlib.contextmanager
def run_scorer(
    bootstrap: str,
    app_id: str,
    data_dir: Path,
    log: Path,
    env: Mapping[str, str] | None = None,
    *,
    settle: bool = True,
) -> Iterator[Scorer]:
    """A scorer process, up (``/healthz``) and, with ``settle``, through the backlog."""
    port = free_port()
    full_env = {
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "FAIRLANE_APP_ID": app_id,
        "FAIRLANE_WEB_PORT": str(port),
        "FAIRLANE_DATA_DIR": str(data_dir),
        **SCORER_ENV,
        **(env or {}),
    }
    with service("fairlane_scorer", [], full_env, log) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/healthz", proc, log)
        scorer = Scorer(url, proc, log)
        if settle:
            scorer.settle()
        yield scorer


async def produce_samples(bootstrap: str, samples: Sequence[NodeSample]) -> list[tuple[int, int]]:
    """Onto the node-samples topic, keyed by node: each record's (partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        sent = []
        for s in samples:
            key, value = s.node.encode(), encode(s)
            sent.append(
                await producer.send(NODE_SAMPLES, value, key=key, headers=signed(key, value))
            )
        await producer.flush()
        return [(meta.partition, meta.offset) for meta in [await f for f in sent]]
    finally:
        await producer.stop()


async def produce_placement(bootstrap: str, event: PlacementEvent) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        await producer.send_and_wait(PLACEMENTS, encode(event), key=event.placement_id.encode())
    finally:
        await producer.stop()


async def produce_progress(bootstrap: str, records: Sequence[JobProgress]) -> list[tuple[int, int]]:
    """Onto the job-progress topic, keyed by placement id: each record's (partition, offset)."""
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all")
    await producer.start()
    try:
        origins = []
        for r in records:
            meta = await producer.send_and_wait(
                JOB_PROGRESS, encode(r), key=r.placement_id.encode()
            )
            origins.append((meta.partition, meta.offset))
        return origins
    finally:
        await producer.stop()


async def dead_letters_from(
    bootstrap: str, topic: str, origins: set[tuple[int, int]], timeout_s: float = 30
) -> list[DeadLetter]:
    """The dead letters of records of ``topic`` at these (partition, offset) origins,
    read from the dead-letter topic's start until all are found or ``timeout_s``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    found: list[DeadLetter] = []
    try:
        consumer.assign([TopicPartition(DEAD_LETTER, 0)])
        await consumer.seek_to_beginning()
        deadline = time.monotonic() + timeout_s
        while len(found) < len(origins) and time.monotonic() < deadline:
            for messages in (await consumer.getmany(timeout_ms=500)).values():
                for m in messages:
                    d = decode(DeadLetter, m.value)
                    if d.source_topic == topic and (d.partition, d.offset) in origins:
                        found.append(d)
    finally:
        await consumer.stop()
    return found


def now_ms() -> int:
    return int(time.time() * 1000)


def gang_placement(
    pid: str, node: str, uuids: Sequence[str], kind: str = "created", ts_ms: int | None = None
) -> PlacementEvent:
    """A lifecycle event of a placement of ``uuids`` (indices 0..) on one node (at
    ``ts_ms``, default now)."""
    assignment = NodeAssignment(
        node=node,
        node_rank=0,
        gpus=[GpuSlot(uuid=u, index=i) for i, u in enumerate(uuids)],
        cuda_visible_devices=",".join(str(i) for i in range(len(uuids))),
        master_addr=node,
        master_port=29500,
        world_size=len(uuids),
    )
    return PlacementEvent(
        schema_="placement/1",
        placement_id=pid,
        job_id=f"j-{pid}",
        namespace="it",
        event=kind,
        ts_ms=now_ms() if ts_ms is None else ts_ms,
        nodes=[assignment],
    )


def job_progress(
    pid: str, ts_ms: int, times: Mapping[str, float], job_class: str = "compute-bound"
) -> JobProgress:
    """One minute of a job whose rank r ran on the r-th GPU of ``times`` (uuid ->
    compute seconds per step)."""
    return JobProgress(
        schema_="job-progress/1",
        placement_id=pid,
        job_class=job_class,
        ts_ms=ts_ms,
        window_s=60.0,
        steps_per_s=1 / max(times.values()),
        ranks=[
            RankProgress(rank=r, uuid=u, compute_s_per_step=t, steps=int(60 / t))
            for r, (u, t) in enumerate(times.items())
        ],
    )


def idle_sample(node: str, uuids: Sequence[str], model: str) -> NodeSample:
    """One healthy, idle sample of the node's GPUs (indices 0..), now."""
    gpus = [gpu_sample(uuid=u, index=i, model=model) for i, u in enumerate(uuids)]
    return NodeSample(schema_="node-sample/1", node=node, ts_ms=now_ms(), source="sim", gpus=gpus)


async def score_gpus(
    scorer: Scorer, bootstrap: str, node: str, uuids: Sequence[str], model: str
) -> None:
    """Score the node's GPUs once; return when the speed learner has heard their model."""
    infos = scorer.metric("fairlane_scorer_speed_gpu_infos_total")
    await produce_samples(bootstrap, [idle_sample(node, uuids, model)])
    await eventually(
        lambda: scorer.metric("fairlane_scorer_speed_gpu_infos_total") >= infos + len(uuids)
    )


async def place(scorer: Scorer, bootstrap: str, pid: str, node: str, uuids: Sequence[str]) -> None:
    """Place a job on the node's GPUs; return when the scorer has applied it."""
    applied = scorer.metric("fairlane_scorer_placement_events_total")
    await produce_placement(bootstrap, gang_placement(pid, node, uuids))
    await eventually(lambda: scorer.metric("fairlane_scorer_placement_events_total") > applied)


async def score_then_place(
    scorer: Scorer, bootstrap: str, node: str, uuids: Sequence[str], pid: str, model: str
) -> None:
    """Score the node's GPUs once (the speed learner hears their model), then place a
    job on them; return when the scorer has both."""
    await score_gpus(scorer, bootstrap, node, uuids, model)
    await place(scorer, bootstrap, pid, node, uuids)


async def place_fresh_gpus(
    scorer: Scorer,
    bootstrap: str,
    node: str,
    model: str,
    retired: list[tuple[str, list[str]]],
    count: int = 2,
) -> tuple[str, list[str]]:
    """``count`` new GPUs of ``node`` (``<node>-g<i>``), scored and wholly placed as
    ``p-<node>`` (:func:`score_then_place`), to be retired by the caller (``retired``):
    the placement id and the uuids."""
    uuids = [f"{node}-g{i}" for i in range(count)]
    retired.append((node, uuids))
    pid = f"p-{node}"
    await score_then_place(scorer, bootstrap, node, uuids, pid, model)
    return pid, uuids


async def retire_gpus(
    bootstrap: str, nodes: Sequence[tuple[str, Sequence[str]]], model: str
) -> None:
    """Flag the (node, uuids) a test scored stale on the shared scores topic, so that no
    later test's scheduler places on them."""
    await publish(
        bootstrap,
        [
            gpu_score(node=node, uuid=uuid, index=i, model=model, stale=True, ts_ms=now_ms())
            for node, uuids in nodes
            for i, uuid in enumerate(uuids)
        ],
    )


R = TypeVar("R", GpuScore, GpuSpeed)


@dataclass
class TopicReader(Generic[R]):
    """Reads a topic of ``record_type`` records from where it ended at ``start()``,
    keeping those ``keep`` accepts (a test's own nodes or GPUs)."""

    bootstrap: str
    topic: str
    record_type: type[R]
    keep: Callable[[R, bytes | None], bool]
    records: list[R] = field(default_factory=list)
    tombstones: list[bytes] = field(default_factory=list)  # keys of null values, all
    _consumer: AIOKafkaConsumer | None = None

    async def start(self) -> None:
        consumer = AIOKafkaConsumer(bootstrap_servers=self.bootstrap, enable_auto_commit=False)
        await consumer.start()
        parts = [TopicPartition(self.topic, p) for p in range(STREAM_PARTITIONS)]
        consumer.assign(parts)
        for tp, offset in (await consumer.end_offsets(parts)).items():
            consumer.seek(tp, offset)
        self._consumer = consumer

    async def stop(self) -> None:
        if self._consumer is not None:
            await self._consumer.stop()

    async def until(self, done: Callable[[list[R]], bool], timeout_s: float = 60) -> list[R]:
        assert self._consumer is not None
        deadline = time.monotonic() + timeout_s
        while not done(self.records):
            if time.monotonic() > deadline:
                raise AssertionError(
                    f"{self.topic}: not complete after {timeout_s}s: {self.records}"
                )
            for messages in (await self._consumer.getmany(timeout_ms=500)).values():
                for m in messages:
                    if m.value is None:
                        self.tombstones.append(m.key)
                        continue
                    record = decode(self.record_type, m.value)
                    if self.keep(record, m.key):
                        self.records.append(record)
        return self.records


@contextlib.asynccontextmanager
async def _reading(reader: TopicReader[R]) -> AsyncIterator[TopicReader[R]]:
    await reader.start()
    try:
        yield reader
    finally:
        await reader.stop()


def _own_speed(speed: GpuSpeed, key: bytes | None, prefix: str) -> bool:
    assert key == f"{speed.uuid}/{speed.job_class}".encode()
    return speed.uuid.startswith(prefix)


def read_speeds(
    bootstrap: str, prefix: str
) -> contextlib.AbstractAsyncContextManager[TopicReader[GpuSpeed]]:
    """The learned speeds of GPUs whose uuid starts with ``prefix`` (each key checked)."""
    keep = functools.partial(_own_speed, prefix=prefix)
    return _reading(TopicReader(bootstrap, GPU_SPEEDS, GpuSpeed, keep))


def read_scores(
    bootstrap: str, prefix: str
) -> contextlib.AbstractAsyncContextManager[TopicReader[GpuScore]]:
    """The score records of nodes whose name starts with ``prefix``."""
    return _reading(
        TopicReader(bootstrap, GPU_SCORES, GpuScore, lambda score, _: score.node.startswith(prefix))
    )


async def eventually(check: Callable[[], bool], timeout_s: float = 60) -> None:
    """Poll ``check``; a worker's web port briefly refusing (a rebalance) is "not yet"."""
    deadline = time.monotonic() + timeout_s
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if check():
                return
        if time.monotonic() > deadline:
            raise AssertionError(f"not true after {timeout_s}s")
        await asyncio.sleep(0.25)
