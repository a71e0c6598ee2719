"""Node identity on the real stream: a sample the scorer cannot trace to its node's key
changes no score; it is dead-lettered with the reason and counted (issue 35)."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from aiokafka import AIOKafkaProducer

from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.signing import SIGNATURE_HEADER, RingSigner, parse_key_ring
from fairlane_events.topics import NODE_SAMPLES
from tests.factories import gpu_sample
from tests.node_keys import signed
from tests.scorer_harness import (
    Scorer,
    dead_letters_from,
    eventually,
    produce_samples,
    read_scores,
    run_scorer,
)

pytestmark = pytest.mark.integration

BUSY = {"sm_active": 1.0, "gpu_util_pct": 100.0, "mem_util_pct": 95.0, "power_w": 690.0}
Headers = list[tuple[str, bytes]] | None


@pytest.fixture(scope="module")
def scorer(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scorer]:
    tmp = tmp_path_factory.mktemp("scorer")
    app_id = f"scorer-sig-{time.time_ns()}"
    with run_scorer(kafka_bootstrap, app_id, tmp / "data", tmp / "scorer.log") as s:
        yield s


def _sample(node: str, ts_ms: int, uuid: str, **metrics: object) -> NodeSample:
    gpus = [gpu_sample(uuid=uuid, index=0, **metrics)]
    return NodeSample(schema_="node-sample/1", node=node, ts_ms=ts_ms, source="sim", gpus=gpus)


def _forgeries(real: str, evil: str, uuid: str, ts: int) -> list[tuple[bytes, bytes, Headers]]:
    """(key, value, headers): what someone who can write the topic, but holds no node's
    key, can send about the real node's GPU."""
    as_evil = encode(_sample(evil, ts, uuid, **BUSY))
    as_real = encode(_sample(real, ts, uuid, **BUSY))
    own_ring = RingSigner(parse_key_ring("test-1 the-attackers-own-secret-0123456789"))
    real_sig = signed(real.encode(), as_real)
    return [
        (evil.encode(), as_evil, None),  # unsigned: the forged sample of the issue
        (
            evil.encode(),
            as_evil,
            [(SIGNATURE_HEADER, own_ring.signature(evil, evil.encode(), as_evil))],
        ),
        (evil.encode(), as_evil, real_sig),  # the real node's signature on a renamed record
        (real.encode(), as_real.replace(b'"sm_active":1.0', b'"sm_active":0.9'), real_sig),
        (real.encode(), as_real, [(SIGNATURE_HEADER, b"v1 no-such-key " + b"0" * 64)]),
        (real.encode(), as_real, [(SIGNATURE_HEADER, b"forged")]),
    ]


async def test_forged_samples_change_no_score_and_are_dead_lettered_with_their_reason(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    real, evil = f"sig-{unique}", f"sig-{unique}-evil"
    uuid, ts = f"GPU-{unique}", int(time.time() * 1000)
    unverified = "fairlane_scorer_samples_unverified_total"
    before = {r: scorer.metric(f'{unverified}{{reason="{r}"}}') for r in ("missing", "mismatch")}
    async with read_scores(kafka_bootstrap, real) as reader:
        await produce_samples(kafka_bootstrap, [_sample(real, ts, uuid)])
        await reader.until(lambda r: len(r) >= 1)
        forgeries = _forgeries(real, evil, uuid, ts + 1_000)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_bootstrap)
        await producer.start()
        try:
            origins = set()
            for key, value, headers in forgeries:
                meta = await producer.send_and_wait(NODE_SAMPLES, value, key=key, headers=headers)
                origins.add((meta.partition, meta.offset))
        finally:
            await producer.stop()
        letters = await dead_letters_from(kafka_bootstrap, NODE_SAMPLES, origins)
        # the real node's next sample is scored after every forgery was read (an
        # unchanged score is not published again: the counter says it was scored)
        scored = scorer.metric("fairlane_scorer_gpu_samples_scored_total")
        await produce_samples(kafka_bootstrap, [_sample(real, ts + 2_000, uuid)])
        await eventually(lambda: scorer.metric("fairlane_scorer_gpu_samples_scored_total") > scored)
        read_until = time.monotonic() + 3
        scores = await reader.until(lambda _: time.monotonic() > read_until)
    assert {(d.partition, d.offset) for d in letters} == origins
    assert all(d.error.startswith("signature: ") for d in letters), [d.error for d in letters]
    assert {s.node for s in scores} == {real}  # the forged node never got a score
    assert all(s.score > 0.9 for s in scores), scores  # the busy forgeries moved nothing
    assert scorer.metric(f'{unverified}{{reason="missing"}}') - before["missing"] == 1
    assert scorer.metric(f'{unverified}{{reason="mismatch"}}') - before["mismatch"] == 3
    assert scorer.metric(f'{unverified}{{reason="unknown_key"}}') >= 1
    assert scorer.metric(f'{unverified}{{reason="malformed"}}') >= 1
