"""A flood of one placement's progress records against real Kafka: the scorer lets its
burst and rate through (event time), dead-letters and counts the rest as
``rate_limited``, and the learned speeds are those of the records let through."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from fairlane_events.topics import JOB_PROGRESS
from tests.scorer_harness import (
    Scorer,
    dead_letters_from,
    eventually,
    job_progress,
    now_ms,
    place_fresh_gpus,
    produce_progress,
    read_speeds,
    retire_gpus,
    run_scorer,
)

pytestmark = pytest.mark.integration

MODEL = "NVIDIA H100 80GB HBM3"
WINDOW_MS = 60_000
BURST = 3
#: One record per second of event time beyond a burst of three; every speed that moves
#: is published.
RATE_ENV = {
    "FAIRLANE_PROGRESS_RATE_PER_S": "1",
    "FAIRLANE_PROGRESS_BURST": str(BURST),
    "FAIRLANE_SPEED_EPSILON": "0",
    "FAIRLANE_SPEED_CHECK_S": "1",
}
LIMITED = 'fairlane_scorer_progress_rejected_total{reason="rate_limited"}'
ACCEPTED = "fairlane_scorer_progress_accepted_total"
LEARNED = "fairlane_scorer_progress_learned_total"


@pytest.fixture
def scorer(kafka_bootstrap: str, tmp_path: Path) -> Iterator[Scorer]:
    app_id = f"scorer-rate-{time.time_ns()}"
    with run_scorer(
        kafka_bootstrap, app_id, tmp_path / "data", tmp_path / "scorer.log", RATE_ENV
    ) as s:
        yield s


async def test_a_flood_of_one_placements_progress_is_cut_to_its_rate(
    scorer: Scorer, kafka_bootstrap: str, unique: str
) -> None:
    node = f"flood-{unique}"
    retired: list[tuple[str, list[str]]] = []
    pid, uuids = await place_fresh_gpus(scorer, kafka_bootstrap, node, MODEL, retired, 4)
    try:
        slow = {u: (0.5 if u == uuids[3] else 0.3) for u in uuids}  # the fourth at 0.6x
        t0 = now_ms() - 20 * WINDOW_MS  # event time in the past: none counts as "now"
        honest = [job_progress(pid, t0 + i * WINDOW_MS, slow) for i in range(6)]
        # Forty records in 40 ms of event time, a minute after the last: the bucket is
        # full again (three), then refills 0.04. The excess says the fourth GPU is as fast
        # as the others: had it been learned, its speed would move to 1.
        at_ms = t0 + 6 * WINDOW_MS
        flood = [job_progress(pid, at_ms + i, slow) for i in range(BURST)]
        flood += [job_progress(pid, at_ms + i, dict.fromkeys(uuids, 0.3)) for i in range(3, 40)]
        before = {m: scorer.metric(m) for m in (LIMITED, ACCEPTED, LEARNED)}
        let_through = len(honest) + BURST
        async with read_speeds(kafka_bootstrap, node) as reader:
            origins = await produce_progress(kafka_bootstrap, honest + flood)
            excess = set(origins[let_through:])
            letters = await dead_letters_from(kafka_bootstrap, JOB_PROGRESS, excess)
            await eventually(lambda: scorer.metric(LEARNED) - before[LEARNED] == let_through)
            records = await reader.until(  # only the slow one moves with the last reports
                lambda r: any(s.uuid == uuids[3] and s.reports == let_through for s in r)
            )
        assert len(letters) == len(excess) == 37
        assert all(d.error.startswith(f"rate_limited: placement {pid!r}") for d in letters)
        assert scorer.metric(LIMITED) - before[LIMITED] == len(excess)
        assert scorer.metric(ACCEPTED) - before[ACCEPTED] == let_through
        assert max(s.reports for s in records) == let_through
        latest = {s.uuid: s for s in records}
        assert latest[uuids[3]].speed == pytest.approx(0.6, abs=0.03)
        for uuid in uuids[:3]:
            assert latest[uuid].speed == pytest.approx(1.0, abs=0.03)
    finally:
        await retire_gpus(kafka_bootstrap, retired, MODEL)
