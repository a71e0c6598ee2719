"""Telemetry is trusted only from its node, through the whole live pipeline (issue 35):
a forged sample (another node's name, unsigned: the attack that once raised a degraded
event in under a second), a colliding one (signed by a node that holds a key, naming
another node's GPUs) and a replayed one (a real node's own old record, signature and
all) change no score and raise no event; each is dead-lettered with its reason."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from aiokafka import AIOKafkaProducer

from fairlane_events.codec import decode, encode
from fairlane_events.records import GpuScore, NodeSample
from fairlane_events.topics import GPU_SCORES, NODE_SAMPLES
from tests.chaos.audit import read_topic
from tests.integration.test_scheduler_learned_speed import events_of
from tests.live_stack import LiveStack, live_stack
from tests.node_keys import signed
from tests.node_samples import records_of
from tests.scorer_harness import dead_letters_from

pytestmark = pytest.mark.e2e

MODEL = "L40S"  # no other test's fleet has it, so the placement lands on this fleet
SCENARIO = f"""
name = "hostile-telemetry"

[fleet]
nodes = 1
gpus_per_node = 4
models = ["{MODEL}"]
degraded_fraction = 0.0
"""
REPLAY_TOLERANCE_S = 5
BUSY = {"sm_active": 1.0, "gpu_util_pct": 100.0, "mem_util_pct": 99.0, "temp_c": 95.0}


@pytest.fixture
def stack(
    kafka_bootstrap: str, database_url: str, tmp_path: Path, unique: str
) -> Iterator[LiveStack]:
    scorer = {"FAIRLANE_REPLAY_TOLERANCE_S": str(REPLAY_TOLERANCE_S)}
    with live_stack(
        kafka_bootstrap,
        database_url,
        tmp_path,
        f"trust-{unique}",
        SCENARIO,
        scorer_settings=scorer,
    ) as s:
        yield s


def _placed_gpus(stack: LiveStack) -> tuple[str, set[str]]:
    headers = {"Authorization": f"Bearer {stack.token}"}
    body = {"job_id": "victim", "gpus_per_node": 2, "models": [MODEL], "lease_s": 600}
    answer = httpx.post(f"{stack.url}/v1/placements", json=body, headers=headers)
    assert answer.status_code == 201, answer.text
    placed = answer.json()
    return str(placed["id"]), {g["uuid"] for n in placed["nodes"] for g in n["gpus"]}


def _busy(sample: NodeSample, node: str, uuids: set[str], ts_ms: int) -> bytes:
    """``sample`` as ``node``'s, now, with ``uuids`` throttled hot and fully busy."""
    gpus = [g.model_copy(update=BUSY) if g.uuid in uuids else g for g in sample.gpus]
    return encode(sample.model_copy(update={"node": node, "ts_ms": ts_ms, "gpus": gpus}))


async def _send(
    bootstrap: str, records: list[tuple[bytes, bytes, list[tuple[str, bytes]] | None]]
) -> set[tuple[int, int]]:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    try:
        sent = [
            await producer.send_and_wait(NODE_SAMPLES, v, key=k, headers=h) for k, v, h in records
        ]
    finally:
        await producer.stop()
    return {(m.partition, m.offset) for m in sent}


def test_forged_colliding_and_replayed_samples_change_no_score_and_raise_no_event(
    stack: LiveStack, kafka_bootstrap: str
) -> None:
    stack.wait_for_free_gpus(4)
    placement, uuids = _placed_gpus(stack)
    real, evil = stack.node(0), f"{stack.prefix}-evil"
    (first,) = asyncio.run(records_of(kafka_bootstrap, [real], 1))
    sample = decode(NodeSample, first.value)
    while time.time() * 1000 - sample.ts_ms < (REPLAY_TOLERANCE_S + 2) * 1000:
        time.sleep(0.5)  # the node moves on: its first record becomes a replay
    now_ms = int(time.time() * 1000)
    forged = _busy(sample, evil, uuids, now_ms)
    colliding = _busy(sample, evil, uuids, now_ms + 1)
    hostile = [
        (evil.encode(), forged, None),  # the forged sample: unsigned
        (evil.encode(), colliding, signed(evil.encode(), colliding)),  # a node with a key
        (real.encode(), first.value, list(first.headers)),  # the node's own, replayed
    ]
    origins = asyncio.run(_send(kafka_bootstrap, hostile))
    letters = asyncio.run(dead_letters_from(kafka_bootstrap, NODE_SAMPLES, origins))
    reasons = sorted(d.error.split(":")[0] for d in letters)
    assert reasons == ["quarantine", "replay", "signature"], [d.error for d in letters]
    time.sleep(10)  # ten of the scheduler's degraded checks, ten of the agent's rounds
    events = [e.event for e in asyncio.run(events_of(kafka_bootstrap, placement))]
    assert events == ["created"]
    scores = [
        decode(GpuScore, r.value)
        for r in asyncio.run(read_topic(kafka_bootstrap, GPU_SCORES))
        if r.value is not None and r.key is not None and r.key.decode() in uuids
    ]
    assert scores
    assert {s.node for s in scores} == {real}
    assert min(s.score for s in scores if s.ts_ms >= now_ms) >= 0.65
