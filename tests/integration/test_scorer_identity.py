"""A node speaks only for its own GPUs (issue 35), on real Kafka: replays, GPU uuids
claimed by a second node, floods, samples from the future, a node past its GPU cap and
GPUs that stopped reporting."""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from fairlane_events.records import DeadLetter, GpuScore, NodeSample
from fairlane_events.topics import NODE_SAMPLES
from tests.factories import gpu_sample
from tests.scorer_harness import (
    Scorer,
    TopicReader,
    dead_letters_from,
    now_ms,
    produce_samples,
    read_scores,
    run_scorer,
)

pytestmark = pytest.mark.integration

STEP_MS = 30_000
HEARTBEAT_MS = 60_000  # the scorer's default: an unchanged score is published this often
#: The replay test's stream runs 9 minutes ahead of the wall clock (never stale).
FUTURE_SKEW_S = 900


@pytest.fixture(scope="module")
def scorer(kafka_bootstrap: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scorer]:
    tmp = tmp_path_factory.mktemp("scorer")
    app_id = f"scorer-identity-{time.time_ns()}"
    env = {"FAIRLANE_MAX_FUTURE_SKEW_S": str(FUTURE_SKEW_S)}
    with run_scorer(kafka_bootstrap, app_id, tmp / "data", tmp / "scorer.log", env) as s:
        yield s


def _sample(node: str, ts_ms: int, uuids: Sequence[str], **metrics: object) -> NodeSample:
    gpus = [gpu_sample(uuid=u, index=i, **metrics) for i, u in enumerate(uuids)]
    return NodeSample(schema_="node-sample/1", node=node, ts_ms=ts_ms, source="sim", gpus=gpus)


def _refused(scorer: Scorer, reason: str) -> float:
    return scorer.metric(f'fairlane_scorer_samples_refused_total{{reason="{reason}"}}')


async def _letters(bootstrap: str, origins: list[tuple[int, int]]) -> list[DeadLetter]:
    letters = await dead_letters_from(bootstrap, NODE_SAMPLES, set(origins), timeout_s=120)
    assert {(d.partition, d.offset) for d in letters} == set(origins)
    return letters


async def test_a_replayed_old_sample_is_dead_lettered_and_changes_no_score(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    node = f"replay-{unique}"
    uuid = f"{node}-g"
    t0 = now_ms()  # event time runs ahead of the wall clock: never stale
    stream = [_sample(node, t0 + i * STEP_MS, [uuid]) for i in range(17)]
    old = _sample(node, t0 + 2 * STEP_MS, [uuid], sm_active=1.0, gpu_util_pct=100.0)
    marker = _sample(node, stream[-1].ts_ms + HEARTBEAT_MS, [uuid])
    before = _refused(scorer, "replay")
    async with read_scores(kafka_bootstrap, node) as reader:
        await produce_samples(kafka_bootstrap, stream)
        await reader.until(lambda r: any(s.ts_ms == stream[-1].ts_ms for s in r), timeout_s=120)
        seen = len(reader.records)
        (letter,) = await _letters(kafka_bootstrap, await produce_samples(kafka_bootstrap, [old]))
        await produce_samples(kafka_bootstrap, [marker])
        scores = await reader.until(lambda r: any(s.ts_ms == marker.ts_ms for s in r))
    assert letter.error.startswith("replay: ")
    assert _refused(scorer, "replay") - before == 1
    (after,) = scores[seen:]  # nothing for the replay, the marker's score
    assert after.samples_in_window == len(stream) + 1  # the replay was never kept
    assert after.score == pytest.approx(scores[seen - 1].score)  # its load never counted


async def test_a_uuid_reported_by_a_second_node_is_quarantined(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    prefix = f"bind-{unique}"
    real, evil = f"{prefix}-real", f"{prefix}-evil-node-1"
    uuids = [f"{real}-g0", f"{real}-g1"]
    own = f"{evil}-g9"
    t0 = now_ms()
    quarantined = scorer.metric("fairlane_scorer_gpu_samples_quarantined_total")
    # The real sample under the forger's name, made to look busy, and a GPU of its own.
    forged = _sample(evil, t0 + STEP_MS, [*uuids, own], sm_active=1.0, gpu_util_pct=100.0)
    async with read_scores(kafka_bootstrap, prefix) as reader:
        await produce_samples(kafka_bootstrap, [_sample(real, t0, uuids)])
        await reader.until(lambda r: {s.uuid for s in r} == set(uuids), timeout_s=120)
        (letter,) = await _letters(
            kafka_bootstrap, await produce_samples(kafka_bootstrap, [forged])
        )
        await produce_samples(kafka_bootstrap, [_sample(real, t0 + HEARTBEAT_MS, uuids)])
        scores = await reader.until(
            lambda r: {s.uuid for s in r if s.ts_ms == t0 + HEARTBEAT_MS} == set(uuids)
        )
    assert letter.error.count("quarantine: ") == 2
    assert all(u in letter.error and repr(real) in letter.error for u in uuids)
    assert scorer.metric("fairlane_scorer_gpu_samples_quarantined_total") - quarantined == 2
    assert scorer.metric("fairlane_scorer_quarantined_gpus") >= 2
    theirs = [s for s in scores if s.uuid in uuids]
    assert {s.node for s in theirs} == {real}  # never a record under the forger's name
    assert all(s.score > 0.95 and s.samples_in_window <= 2 for s in theirs)
    (mine,) = [s for s in scores if s.uuid == own]  # the forger's own GPU still scores
    assert mine.node == evil


async def test_a_flood_from_one_node_is_rate_limited_and_its_row_stays_bounded(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    node = f"flood-{unique}"
    uuid = f"{node}-g"
    t0 = now_ms()
    flood = [_sample(node, t0 + i, [uuid]) for i in range(200)]  # 1 ms apart
    before = _refused(scorer, "rate")
    async with read_scores(kafka_bootstrap, node) as reader:
        origins = await produce_samples(kafka_bootstrap, flood)
        letters = await _letters(kafka_bootstrap, origins[1:])
        await produce_samples(kafka_bootstrap, [_sample(node, t0 + HEARTBEAT_MS, [uuid])])
        scores = await reader.until(lambda r: any(s.ts_ms == t0 + HEARTBEAT_MS for s in r))
    assert all(d.error.startswith("rate: ") for d in letters)
    assert _refused(scorer, "rate") - before == len(flood) - 1
    assert scores[-1].samples_in_window == 2  # the flood's first record and the next


async def test_a_sample_from_a_clock_far_ahead_is_dead_lettered_and_binds_nothing(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    """A node whose clock runs 20 minutes ahead claims a free uuid: refused, the uuid
    stays free for the node that really holds it, and the node's own samples once its
    clock is right are not replays of the refused one."""
    prefix = f"future-{unique}"
    ahead, holder = f"{prefix}-ahead", f"{prefix}-holder"
    uuid, own = f"{prefix}-g", f"{ahead}-own"
    t0 = now_ms()
    before = _refused(scorer, "future")
    future = _sample(ahead, t0 + 20 * 60_000, [uuid, own])
    async with read_scores(kafka_bootstrap, prefix) as reader:
        (letter,) = await _letters(
            kafka_bootstrap, await produce_samples(kafka_bootstrap, [future])
        )
        await produce_samples(
            kafka_bootstrap, [_sample(holder, t0, [uuid]), _sample(ahead, t0, [own])]
        )
        scores = await reader.until(lambda r: {s.uuid for s in r} == {uuid, own}, timeout_s=120)
    assert letter.error.startswith("future: ")
    assert f"at most {FUTURE_SKEW_S} s" in letter.error
    assert _refused(scorer, "future") - before == 1
    assert {(s.node, s.uuid, s.ts_ms) for s in scores} == {(holder, uuid, t0), (ahead, own, t0)}


async def test_a_node_past_its_gpu_cap_loses_the_new_gpus_and_keeps_its_own(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    """64 GPUs (the default cap, one full record) and then three more: those three are
    removed and the record dead-lettered once, its other GPUs scored."""
    node = f"cap-{unique}"
    held = [f"{node}-g{i}" for i in range(64)]
    fresh = [f"{node}-new{i}" for i in range(3)]
    t0 = now_ms()
    before = _refused(scorer, "gpu_cap")
    grown = _sample(node, t0 + STEP_MS, [*held[:8], *fresh])
    marker = _sample(node, t0 + HEARTBEAT_MS, held)
    async with read_scores(kafka_bootstrap, node) as reader:
        await produce_samples(kafka_bootstrap, [_sample(node, t0, held)])
        await reader.until(lambda r: {s.uuid for s in r} == set(held), timeout_s=120)
        (letter,) = await _letters(kafka_bootstrap, await produce_samples(kafka_bootstrap, [grown]))
        await produce_samples(kafka_bootstrap, [marker])
        scores = await reader.until(
            lambda r: {s.uuid for s in r if s.ts_ms == marker.ts_ms} == set(held)
        )
    assert letter.error.count("gpu_cap: ") == len(fresh)
    assert all(u in letter.error for u in fresh)
    assert _refused(scorer, "gpu_cap") - before == 1
    assert not {s.uuid for s in scores} & set(fresh)  # never scored
    last = {s.uuid: s.samples_in_window for s in scores if s.ts_ms == marker.ts_ms}
    assert {u for u, n in last.items() if n == 3} == set(held[:8])  # the capped record's own
    assert {u for u, n in last.items() if n == 2} == set(held[8:])


async def _read_until(reader: TopicReader[GpuScore], deadline: float) -> None:
    """Everything the topic gets until ``deadline`` (monotonic)."""
    timeout_s = deadline - time.monotonic() + 60
    await reader.until(lambda _: time.monotonic() > deadline, timeout_s=timeout_s)


async def test_a_node_that_stopped_is_tombstoned_and_never_announced_again(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    """Stale after 3 s, expired after 8 s: each GPU gets one tombstone on the compacted
    topic, and no record at all for twice the expiry after it, across a restart too."""
    node = f"gone-{unique}"
    uuids = [f"{node}-g0", f"{node}-g1"]
    keys = [u.encode() for u in uuids]
    expire_s = 8.0
    env = {"FAIRLANE_INTERVAL_S": "1", "FAIRLANE_GPU_EXPIRE_AFTER_S": str(expire_s)}
    app_id, data = f"scorer-gone-{unique}", tmp_path / "data"
    async with read_scores(kafka_bootstrap, node) as reader:
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "a.log", env) as first:
            await produce_samples(kafka_bootstrap, [_sample(node, now_ms(), uuids)])
            await reader.until(lambda r: {s.uuid for s in r} == set(uuids), timeout_s=120)
            await reader.until(lambda _: set(keys) <= set(reader.tombstones), timeout_s=120)
            assert first.metric("fairlane_scorer_gpus_forgotten_total") >= 2
            seen = len(reader.records)
            await _read_until(reader, time.monotonic() + 2 * expire_s)
        with run_scorer(kafka_bootstrap, app_id, data, tmp_path / "b.log", env):
            await _read_until(reader, time.monotonic() + 2 * expire_s)
    assert reader.records[seen:] == []  # nothing published for them after the tombstone
    for key in keys:
        assert 1 <= reader.tombstones.count(key) <= 2  # the restart may tombstone again
