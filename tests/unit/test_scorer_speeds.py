"""The learner's rows, priors and step over joined reports; which speeds are published."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from fairlane_scorer.core.progress import JoinedProgress, JoinedRank
from fairlane_scorer.core.records import model_speed
from fairlane_scorer.core.speed_book import PublishConfig, SpeedBook
from fairlane_scorer.core.speed_input import GpuInfo
from fairlane_scorer.core.speeds import (
    UNKNOWN_MODEL,
    SpeedRow,
    clock_priors,
    decode_reference,
    decode_row,
    encode_reference,
    encode_row,
    gone,
    learn,
    named,
    speed_key,
    split_key,
    to_report,
)
from fairlane_scorer.errors import SpeedRowFormatError
from fairlane_scoring.class_reference import ClassReference, JobCost, ReferenceConfig
from fairlane_scoring.learned_speed import LearnerConfig, Running, SpeedState

T0 = 1_700_000_000_000
H100 = "NVIDIA H100 80GB HBM3"
A100 = "NVIDIA A100-SXM4-40GB"
CONFIG = LearnerConfig()
CLASS = "compute-bound"


def report(ts_ms: int, times: dict[str, float], job_class: str = CLASS) -> JoinedProgress:
    ranks = tuple(JoinedRank(uuid, f"node-{uuid}", t) for uuid, t in times.items())
    return JoinedProgress("p1", job_class, ts_ms, 60.0, ranks)


def infos(*uuids: str, model: str = H100, busy_mhz: float | None = 1470.0) -> dict[str, GpuInfo]:
    return {u: GpuInfo(u, f"node-{u}", model, busy_mhz) for u in uuids}


def run(
    reports: list[JoinedProgress], fleet: dict[str, GpuInfo], priors: dict[str, float] | None = None
) -> dict[str, SpeedRow]:
    rows: dict[str, SpeedRow] = {}
    for r in reports:
        rows.update(learn(rows, r, fleet, priors or {}, CONFIG).rows)
    return rows


def test_keys_carry_the_uuid_and_the_class() -> None:
    assert speed_key("GPU-1", "llama") == "GPU-1/llama"
    assert split_key("odd/uuid/llama") == ("odd/uuid", "llama")


def test_rows_round_trip_and_other_formats_are_refused() -> None:
    row = SpeedRow(SpeedState(Running(1.5, -0.2, 0.01, T0), 0.5, 0.0, 3, 1), "n1", H100, T0)
    assert decode_row(encode_row(row)) == row
    for data in (b"{}", b'{"format": "speed-row/2"}', b"[1]", b"not json"):
        with pytest.raises(SpeedRowFormatError):
            decode_row(data)


def test_class_references_round_trip_and_other_formats_are_refused() -> None:
    reference = ClassReference((JobCost("p1", -1.6, T0, 3), JobCost("p2", -1.4, T0 + 1, 1)))
    assert decode_reference(encode_reference(reference)) == reference
    for data in (b"{}", b'{"format": "class-reference/2"}', b'{"format": "speed-row/1"}'):
        with pytest.raises(SpeedRowFormatError):
            decode_reference(data)


def test_across_jobs_a_one_rank_job_teaches_its_gpu_and_joins_its_class() -> None:
    """A class whose 20 other placements ran at 0.3 s a step on typical H100s: a
    placement at 0.5 s on one H100 teaches it it is slow; its replay changes nothing."""
    across = LearnerConfig(cross_job=ReferenceConfig())
    usual = math.log(0.3 * model_speed(H100)[0])  # normalised: on a speed-1.0 GPU
    others = tuple(JobCost(f"other-{i}", usual, T0) for i in range(20))
    reference = ClassReference(others)
    one = report(T0 + 60_000, {"slow": 0.5})
    result = learn({}, one, infos("slow"), {}, across, reference=reference)
    assert result.rows[speed_key("slow", CLASS)].state.stats.mean == pytest.approx(
        math.log(0.3 / 0.5)
    )
    assert result.reference is not None
    assert [c.job for c in result.reference.costs][-1] == "p1"
    replay = learn(result.rows, one, infos("slow"), {}, across, reference=result.reference)
    assert replay.replayed
    assert replay.reference is None
    assert learn({}, one, infos("slow"), {}, CONFIG, reference=reference).rows == {}


def test_the_nvml_prior_is_the_busy_clock_against_the_models_median() -> None:
    fleet = {
        **infos("a", "b", "c", busy_mhz=1470.0),  # healthy H100s, SW-power-capped at load
        **infos("slow", busy_mhz=735.0),
        **infos("old", model=A100, busy_mhz=1410.0),  # its own model's median: itself
        **infos("idle", busy_mhz=None),  # never seen busy: no prior
    }
    priors = clock_priors(fleet, CONFIG)
    assert priors["a"] == 0.0
    assert priors["old"] == 0.0
    assert math.isclose(priors["slow"], CONFIG.clock_exponent * math.log(0.5))
    assert "idle" not in priors


def test_a_report_carries_each_models_catalogue_speed() -> None:
    fleet = {**infos("a"), **infos("b", model=A100)}
    ranks = to_report(report(T0, {"a": 0.1, "b": 0.2, "c": 0.3}), fleet).ranks
    assert ranks[0].model_speed > 1.0  # an H100 against the A100 reference
    assert ranks[1].model_speed == 1.0
    assert ranks[2].model_speed == 1.0  # unknown model: the default


def test_a_gpu_at_six_tenths_is_learned_at_six_tenths() -> None:
    fleet = infos("a", "b", "c", "slow")
    times = {"a": 0.3, "b": 0.3, "c": 0.3, "slow": 0.5}
    rows = run([report(T0 + i * 60_000, times) for i in range(6)], fleet)
    assert set(rows) == {speed_key(u, CLASS) for u in times}
    slow = rows[speed_key("slow", CLASS)]
    assert slow.state.reports == 6
    assert slow.model == H100
    assert slow.node == "node-slow"
    assert slow.last_ts_ms == T0 + 5 * 60_000
    assert math.isclose(math.exp(slow.state.stats.mean), 0.6, rel_tol=1e-6)


def test_a_replayed_report_teaches_nothing_twice() -> None:
    fleet = infos("a", "b")
    first = report(T0, {"a": 0.3, "b": 0.5})
    rows = run([first], fleet)
    again = learn(rows, first, fleet, {}, CONFIG)
    assert again.replayed
    assert again.rows == {}
    older = learn(rows, report(T0 - 1, {"a": 0.3, "b": 0.5}), fleet, {}, CONFIG)
    assert older.replayed


def test_only_the_gpus_that_missed_a_report_learn_it_on_replay() -> None:
    fleet = infos("a", "b", "c")
    first = report(T0, {"a": 0.3, "b": 0.3, "c": 0.5})
    rows = run([first], fleet)
    del rows[speed_key("c", CLASS)]  # its row never reached the changelog
    again = learn(rows, first, fleet, {}, CONFIG)
    assert not again.replayed
    assert set(again.rows) == {speed_key("c", CLASS)}


def test_a_one_rank_job_teaches_nothing() -> None:
    result = learn({}, report(T0, {"a": 0.3}), infos("a"), {}, CONFIG)
    assert result.rows == {}
    assert not result.replayed


def test_a_gpu_the_scores_never_named_keeps_its_last_known_model() -> None:
    rows = run([report(T0, {"a": 0.3, "b": 0.3})], {})
    assert rows[speed_key("a", CLASS)].model == UNKNOWN_MODEL
    rows = run([report(T0, {"a": 0.3, "b": 0.3})], infos("a"))
    later = learn(rows, report(T0 + 1, {"a": 0.3, "b": 0.3}), {}, {}, CONFIG)
    assert later.rows[speed_key("a", CLASS)].model == H100


# -- what is published ---------------------------------------------------------------------

PUBLISH = PublishConfig(epsilon=0.01, heartbeat_s=300, min_peers=3)


def learned_fleet(slow_time: float = 0.5, rounds: int = 6) -> dict[str, SpeedRow]:
    times = {"a": 0.3, "b": 0.3, "c": 0.3, "slow": slow_time}
    return run([report(T0 + i * 60_000, times) for i in range(rounds)], infos(*times))


def book() -> SpeedBook:
    return SpeedBook(CONFIG, PUBLISH)


def test_first_speeds_are_published_peer_relative_with_their_interval() -> None:
    rows, now = learned_fleet(), T0 + 10 * 60_000
    published = dict(book().changed(rows, rows, {}, now))
    assert set(published) == set(rows)
    slow = published[speed_key("slow", CLASS)]
    assert slow.speed == pytest.approx(0.6, abs=0.02)
    assert slow.low < slow.speed < slow.high
    assert slow.reports == 6
    assert slow.confidence > 0.9
    assert (slow.uuid, slow.job_class, slow.model, slow.node) == ("slow", CLASS, H100, "node-slow")
    assert slow.ts_ms == now
    assert published[speed_key("a", CLASS)].speed == pytest.approx(1.0, abs=1e-9)


def test_fewer_peers_than_the_minimum_leave_the_estimate_as_it_is() -> None:
    rows = run([report(T0 + i, {"a": 0.3, "slow": 0.5}) for i in range(6)], infos("a", "slow"))
    published = dict(book().changed(rows, rows, {}, T0 + 10))
    # Two GPUs tell only their ratio; their common level is where the priors pin it.
    slow, fast = published[speed_key("slow", CLASS)], published[speed_key("a", CLASS)]
    assert slow.speed / fast.speed == pytest.approx(0.6, abs=0.02)
    assert slow.speed < 1.0 < fast.speed


def test_a_speed_is_published_again_only_when_it_moves_or_its_heartbeat_is_due() -> None:
    rows, now = learned_fleet(), T0 + 10 * 60_000
    b = book()
    b.changed(rows, rows, {}, now)
    assert b.changed(rows, rows, {}, now + 1000) == []  # nothing moved
    assert b.heartbeat(rows, {}, now + 299_000) == []
    beat = b.heartbeat(rows, {}, now + 300_000)
    assert {key for key, _ in beat} == set(rows)
    slower = learned_fleet(slow_time=0.6, rounds=8)  # the slow GPU got slower
    moved = b.changed(slower, [speed_key("slow", CLASS)], {}, now + 301_000)
    assert [key for key, _ in moved] == [speed_key("slow", CLASS)]


def test_a_row_that_took_its_model_late_is_published_again_with_it() -> None:
    """A backlog read in another order: speeds published as of an unknown model, then
    the scores name it; the speed has not moved, yet its record must say the model."""
    rows, now = learned_fleet(), T0 + 10 * 60_000
    unnamed = {key: replace(row, model=UNKNOWN_MODEL) for key, row in rows.items()}
    b = book()
    b.changed(unnamed, unnamed, {}, now)
    key = speed_key("slow", CLASS)
    again = b.changed(rows, [key], {}, now + 1000)
    assert [(k, record.model) for k, record in again] == [(key, H100)]


def test_a_moved_peer_median_republishes_the_whole_group() -> None:
    rows, now = learned_fleet(), T0 + 10 * 60_000
    b = book()
    b.prime(rows, {}, now)
    b.heartbeat(rows, {}, now)  # everything published once
    faster = SpeedState(Running(50.0, math.log(1.5), 0.0, now), 0.0, 0.0, 50, 0)
    touched = [speed_key("a", CLASS), speed_key("b", CLASS)]
    rows = {**rows, **{k: SpeedRow(faster, rows[k].node, H100, now) for k in touched}}
    published = dict(b.changed(rows, touched, {}, now + 1))
    # The median went from 1.0 to 1.25: the slow GPU, untouched, reads 0.48 now.
    assert published[speed_key("slow", CLASS)].speed == pytest.approx(0.6 / 1.25, abs=0.02)


def test_an_nvml_prior_sets_the_level_before_reports_outweigh_it() -> None:
    rows = run([report(T0, {"a": 0.3, "b": 0.3})], infos("a", "b"))
    priors = {"a": math.log(0.5)}
    first = dict(book().changed(rows, rows, priors, T0))
    assert first[speed_key("a", CLASS)].speed < first[speed_key("b", CLASS)].speed
    assert first[speed_key("a", CLASS)].confidence < 1.0


def test_prime_then_heartbeat_resends_every_speed_once() -> None:
    rows, now = learned_fleet(), T0 + 10 * 60_000
    b = book()
    assert not b.primed
    b.prime(rows, {}, now)
    assert len(b.heartbeat(rows, {}, now)) == len(rows)
    assert b.heartbeat(rows, {}, now + 1) == []
    b.reset()  # a rebalance: prime again, then every speed once more
    assert len(b.heartbeat(rows, {}, now + 2)) == len(rows)


def test_publish_config_is_validated() -> None:
    with pytest.raises(ValueError, match="min_peers"):
        PublishConfig(min_peers=0)
    with pytest.raises(ValueError, match="retention_s"):
        PublishConfig(retention_s=0)


DAY_MS = 86_400_000


def seen(uuid: str, seen_ms: int | None, model: str = H100) -> GpuInfo:
    return GpuInfo(uuid, f"node-{uuid}", model, 1.0, seen_ms)


@pytest.mark.parametrize(
    ("last_report_ms", "seen_ms", "is_gone"),
    [
        (T0, T0, True),  # neither reported nor sampled for longer than the retention
        (T0, T0 + 2 * DAY_MS, False),  # still sampled: its speed still holds
        (T0 + 2 * DAY_MS, T0, False),  # still reported on (from a job's clock)
        (T0, None, True),  # no sample time (an older version's info): the reports decide
        (T0 + DAY_MS - 1, T0, False),  # exactly the retention: kept
    ],
)
def test_a_gpu_gone_from_the_fleet_loses_its_rows_after_the_retention(
    last_report_ms: int, seen_ms: int | None, is_gone: bool
) -> None:
    row = SpeedRow(SpeedState(), "node-a", H100, last_report_ms)
    rows = {speed_key("a", CLASS): row}
    keys, uuids = gone(rows, {"a": seen("a", seen_ms)}, T0 + 2 * DAY_MS - 1, DAY_MS)
    assert keys == ([speed_key("a", CLASS)] if is_gone else [])
    assert uuids == (["a"] if is_gone and seen_ms is not None else [])


def test_a_gpus_info_goes_only_with_its_last_row() -> None:
    old, recent = (
        SpeedRow(SpeedState(), "n", H100, T0),
        SpeedRow(SpeedState(), "n", H100, T0 + DAY_MS),
    )
    rows = {speed_key("a", "old-class"): old, speed_key("a", CLASS): recent}
    fleet = {"a": seen("a", T0), "idle": seen("idle", T0), "new": seen("new", T0 + DAY_MS)}
    keys, uuids = gone(rows, fleet, T0 + DAY_MS + 1, DAY_MS)
    assert keys == [speed_key("a", "old-class")]
    assert uuids == ["idle"]  # "a" still has a row; "new" was sampled within the retention


def test_a_forgotten_gpu_is_published_no_more_and_its_peers_follow_the_new_median() -> None:
    rows, now = learned_fleet(), T0 + 10 * 60_000
    b = SpeedBook(CONFIG, PublishConfig(min_peers=2))
    b.prime(rows, {}, now)
    b.heartbeat(rows, {}, now)
    gone_keys = [speed_key("a", CLASS), speed_key("b", CLASS)]
    rows = {k: row for k, row in rows.items() if k not in gone_keys}
    moved = dict(b.forget(rows, gone_keys, {}, now + 1))
    # The group's median fell from 1.0 to the middle of c (1.0) and slow (0.6).
    assert moved[speed_key("slow", CLASS)].speed == pytest.approx(0.6 / 0.8, abs=0.02)
    assert moved[speed_key("c", CLASS)].speed == pytest.approx(1.0 / 0.8, abs=0.02)
    assert set(moved) == set(rows)
    assert {key for key, _ in b.heartbeat(rows, {}, now + 10**9)} == set(rows)


def test_rows_learned_before_the_scores_named_the_gpu_take_its_model() -> None:
    unnamed = SpeedRow(SpeedState(), "node-a", UNKNOWN_MODEL, T0)
    rows = {speed_key("a", CLASS): unnamed, speed_key("a", "other"): unnamed}
    rows[speed_key("b", CLASS)] = SpeedRow(SpeedState(), "node-b", A100, T0)
    fleet = infos("a", "b")
    assert named(rows, fleet["a"], [CLASS, "other", "never"]) == {
        speed_key("a", CLASS): SpeedRow(SpeedState(), "node-a", H100, T0),
        speed_key("a", "other"): SpeedRow(SpeedState(), "node-a", H100, T0),
    }
    assert named(rows, fleet["b"], [CLASS]) == {}  # named already: the row keeps its model
