"""The scorer process against real Kafka: hostile input, allocation masking, staleness."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import orjson
import pytest
from aiokafka import AIOKafkaProducer

from fairlane_events.codec import encode
from fairlane_events.records import GpuScore, NodeSample
from fairlane_events.topics import NODE_SAMPLES, TopicSpec
from fairlane_runtime.kafka import ensure_topics
from fairlane_scorer.app import placements_by_node_topic
from tests.factories import gpu_sample, single_gpu_placement
from tests.node_keys import SIGNING_ENV, signed
from tests.scorer_harness import (
    Scorer,
    dead_letters_from,
    eventually,
    produce_placement,
    produce_samples,
    read_scores,
    run_scorer,
)

pytestmark = pytest.mark.integration

THRESHOLD = 0.65
STEP_MS = 30_000
BUSY = {"sm_active": 1.0, "gpu_util_pct": 100.0, "mem_util_pct": 80.0, "power_w": 650.0}


@pytest.fixture(scope="module")
def scorer(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scorer]:
    tmp = tmp_path_factory.mktemp("scorer")
    app_id = f"scorer-it-{time.time_ns()}"
    with run_scorer(kafka_bootstrap, app_id, tmp / "data", tmp / "scorer.log") as s:
        yield s


def _sample(node: str, ts_ms: int, uuid: str, index: int = 0, **metrics: object) -> NodeSample:
    return NodeSample(
        schema_="node-sample/1",
        node=node,
        ts_ms=ts_ms,
        source="sim",
        gpus=[gpu_sample(uuid=uuid, index=index, **metrics)],
    )


def _hostile_corpus(node: str, ts_ms: int) -> list[tuple[bytes | None, bytes]]:
    good = encode(_sample(node, ts_ms, f"{node}-bad"))
    text = good.decode()
    for field in ('"gpu_util_pct":0.0', f'"ts_ms":{ts_ms}', '"slowdown_temp_c":90.0'):
        assert field in text, field  # each replacement below must change the record
    key = node.encode()
    return [
        (key, b"\x00\xffnot json"),
        (key, text.replace("node-sample/1", "node-sample/2").encode()),
        (key, text.replace('"temp_c":40.0', '"temp_c":NaN').encode()),
        (key, text.replace('"temp_c":40.0', '"temp_c":Infinity').encode()),
        (key, text.replace('"gpu_util_pct":0.0', '"gpu_util_pct":-5.0').encode()),
        (key, text.replace('"temp_c":40.0', '"temp_c":10000.0').encode()),
        (key, text.replace('"mem_used_bytes":0', f'"mem_used_bytes":{2**45}').encode()),
        (key, orjson.dumps({**orjson.loads(good), "driver_version": "x" * 10_000_000})),
        # What the published schema rejects and pydantic's lax mode once took.
        (key, text.replace('"gpu_util_pct":0.0', '"gpu_util_pct":true').encode()),
        (key, text.replace(f'"ts_ms":{ts_ms}', '"ts_ms":true').encode()),
        (key, text.replace('"temp_c":40.0', '"temp_c":"40"').encode()),
        (key, text.replace('"temp_c":40.0', '"temp_c":-1.0').encode()),
        (key, text.replace('"slowdown_temp_c":90.0', '"slowdown_temp_c":-90.0').encode()),
        (None, good),  # no key: it could land away from its node's state
    ]


async def test_hostile_records_are_dead_lettered_and_good_ones_still_score(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    node = f"hostile-{unique}"
    ts = int(time.time() * 1000)
    corpus = _hostile_corpus(node, ts)
    before = scorer.metric("fairlane_scorer_dead_lettered_total")
    # gzip: the 10 MB record is ~10 KB on the wire, under the broker's 1 MB default limit.
    producer = AIOKafkaProducer(
        bootstrap_servers=kafka_bootstrap, compression_type="gzip", max_request_size=16 * 2**20
    )
    await producer.start()
    try:
        origins = set()
        for key, value in corpus:
            # signed by the node: the decoder, not the signature check, must refuse these
            headers = None if key is None else signed(key, value)
            meta = await producer.send_and_wait(NODE_SAMPLES, value, key=key, headers=headers)
            origins.add((meta.partition, meta.offset))
    finally:
        await producer.stop()
    async with read_scores(kafka_bootstrap, node) as reader:
        await produce_samples(kafka_bootstrap, [_sample(node, ts + 1, f"{node}-good")])
        scores = await reader.until(lambda r: any(s.uuid == f"{node}-good" for s in r))
    assert {s.uuid for s in scores} == {f"{node}-good"}
    letters = await dead_letters_from(kafka_bootstrap, NODE_SAMPLES, origins)
    assert {(d.partition, d.offset) for d in letters} == origins
    assert any(d.truncated and d.value_size > 10_000_000 for d in letters)
    assert scorer.metric("fairlane_scorer_dead_lettered_total") - before >= len(corpus)


def _node_round(
    node: str, ts: int, held: Mapping[str, object], free: Mapping[str, object]
) -> NodeSample:
    gpus = [gpu_sample(uuid=f"{node}-held", index=0, **held)]
    gpus.append(gpu_sample(uuid=f"{node}-free", index=1, **free))
    return NodeSample(schema_="node-sample/1", node=node, ts_ms=ts, source="sim", gpus=gpus)


def _by_gpu(scores: list[GpuScore], uuid: str) -> list[GpuScore]:
    return [s for s in scores if s.uuid == uuid]


async def test_our_jobs_load_is_masked_and_outside_load_is_not(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    node = f"mask-{unique}"
    held, free = f"{node}-held", f"{node}-free"
    t0 = int(time.time() * 1000)  # event time runs ahead of the wall clock: never stale
    applied = scorer.metric("fairlane_scorer_placement_events_total")
    await produce_placement(kafka_bootstrap, single_gpu_placement(node, held, "created", t0))
    await eventually(lambda: scorer.metric("fairlane_scorer_placement_events_total") > applied)
    busy_job = [_node_round(node, t0 + i * STEP_MS, BUSY, {}) for i in range(1, 6)]
    outside = [_node_round(node, t0 + i * STEP_MS, BUSY, BUSY) for i in range(6, 16)]
    released_at = t0 + 16 * STEP_MS
    after = [_node_round(node, released_at + i * STEP_MS, {}, {}) for i in range(20)]
    async with read_scores(kafka_bootstrap, node) as reader:
        await produce_samples(kafka_bootstrap, busy_job + outside)
        await reader.until(lambda r: any(s.ts_ms == outside[-1].ts_ms for s in r))
        applied = scorer.metric("fairlane_scorer_placement_events_total")
        await produce_placement(
            kafka_bootstrap, single_gpu_placement(node, held, "released", released_at)
        )
        await eventually(lambda: scorer.metric("fairlane_scorer_placement_events_total") > applied)
        await produce_samples(kafka_bootstrap, after)
        scores = await reader.until(lambda r: any(s.ts_ms == after[-1].ts_ms for s in r))
    held_scores, free_scores = _by_gpu(scores, held), _by_gpu(scores, free)
    while_held = [s for s in held_scores if s.ts_ms < released_at]
    assert all(s.score > 0.95 and s.components["compute"] is None for s in while_held)
    first_after = next(s for s in held_scores if s.ts_ms >= released_at)
    assert first_after.score > 0.9  # the moment the placement ends: as its health allows
    assert first_after.components["compute"] == 1.0
    loaded = [s.score for s in free_scores if outside[0].ts_ms <= s.ts_ms < released_at]
    assert min(loaded) < THRESHOLD
    recovering = [s.score for s in free_scores if s.ts_ms >= released_at]
    assert recovering[0] < THRESHOLD < recovering[-1]  # only as that load goes away


async def test_a_fractional_tenants_load_counts_only_beyond_its_share(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    """Issue 29: a GPU half held by a fractional placement is not masked; its compute
    headroom counts the load beyond the half, and every record says the GPU's activity."""
    node = f"share-{unique}"
    shared, free = f"{node}-held", f"{node}-free"
    t0 = int(time.time() * 1000)
    applied = scorer.metric("fairlane_scorer_placement_events_total")
    await produce_placement(
        kafka_bootstrap, single_gpu_placement(node, shared, "created", t0, share=0.5)
    )
    await eventually(lambda: scorer.metric("fairlane_scorer_placement_events_total") > applied)
    inside = [_node_round(node, t0 + i * STEP_MS, {"sm_active": 0.4}, {}) for i in range(1, 6)]
    beyond = [_node_round(node, t0 + i * STEP_MS, {"sm_active": 0.9}, {}) for i in range(6, 12)]
    async with read_scores(kafka_bootstrap, node) as reader:
        await produce_samples(kafka_bootstrap, inside + beyond)
        scores = await reader.until(lambda r: any(s.ts_ms == beyond[-1].ts_ms for s in r))
    held_scores = _by_gpu(scores, shared)
    within = [s for s in held_scores if s.ts_ms <= inside[-1].ts_ms]
    assert within
    assert all(s.components["compute"] == 1.0 and s.activity == 0.4 for s in within)
    last = held_scores[-1]
    assert last.ts_ms == beyond[-1].ts_ms
    assert last.components["compute"] == pytest.approx(0.6)  # 0.9 - 0.5 counts
    assert last.activity == 0.9
    assert all(s.activity == 0.0 for s in _by_gpu(scores, free))


async def test_quiet_gpu_flips_to_stale_on_time(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    node = f"quiet-{unique}"
    log = tmp_path / "scorer.log"
    app_id = f"scorer-stale-{unique}"
    env = {"FAIRLANE_INTERVAL_S": "1"}  # stale after 3 s without a sample
    with run_scorer(kafka_bootstrap, app_id, tmp_path / "data", log, env):
        async with read_scores(kafka_bootstrap, node) as reader:
            ts = int(time.time() * 1000)
            await produce_samples(kafka_bootstrap, [_sample(node, ts, f"{node}-g")])
            scores = await reader.until(lambda r: any(s.stale for s in r), timeout_s=30)
            flipped_after_s = time.time() - ts / 1000
    assert not scores[0].stale
    assert 3 <= flipped_after_s < 3 + 1 + 5  # deadline + scan interval + slack


async def test_worker_refuses_to_start_when_its_topic_has_other_partitions(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    app_id = f"scorer-mismatch-{unique}"
    await ensure_topics(kafka_bootstrap, [TopicSpec(placements_by_node_topic(app_id), 3)])
    env = {**os.environ, "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap, "FAIRLANE_APP_ID": app_id}
    env["FAIRLANE_DATA_DIR"] = str(tmp_path)
    env.update(SIGNING_ENV)
    done = subprocess.run(
        [sys.executable, "-m", "fairlane_scorer"],
        env=env,
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert b"has 3 partitions, expected 8" in done.stderr
