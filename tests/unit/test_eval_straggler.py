"""The straggler model against PAI v2020's per-worker mini-batch times.

The hand-worked tables pin the formulas; the tests on the shipped data fail if the
simulator's step model stops matching what the data shows (docs/evaluation-straggler.md).
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from importlib import resources

import numpy as np
import pytest

from fairlane_eval.charts.straggler import read_pai_minibatch
from fairlane_eval.core.straggler import (
    CovTrace,
    StepModel,
    WorkerTimes,
    cov_stragglers,
    job_stragglers,
    longest_episode,
    parse_cov_table,
    parse_worker_times,
    simulated_gang,
)
from fairlane_eval.core.straggler_formulas import (
    cov_ceiling,
    max_over_mean_bounds,
    mean_step,
    one_straggler_cov,
    one_straggler_ratio,
    slowest_over_median,
)


def simulator_step(worker_times: Sequence[float]) -> float:
    """The simulator's model as fairlane_eval.core.engine applies it (``rate = min`` over
    the gang's GPUs, so ``step = max``); to be replaced by its own named function."""
    return max(worker_times)


SIMULATOR_STEP: StepModel = simulator_step


@pytest.fixture(scope="module")
def pai() -> tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]]:
    return read_pai_minibatch()


def times(rows: Sequence[Sequence[float]]) -> WorkerTimes:
    steps = tuple(tuple(float(t) for t in row) for row in rows)
    return WorkerTimes("hand", 25, tuple(10 * i for i in range(len(rows))), steps, 0)


# ----------------------------------------------------------------- hand-worked formulas


@pytest.mark.parametrize(
    ("worker_times", "expected"),
    [
        ((1, 1, 1), 1.0),
        ((1, 2, 3), 1.5),
        ((2, 2, 2, 4), 2.0),  # median of four is the mean of the middle two
        ((1,) * 9 + (2,), 2.0),
    ],
)
def test_slowest_over_median(worker_times: tuple[float, ...], expected: float) -> None:
    assert slowest_over_median(worker_times) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("ratio", "ddof", "expected"),
    [
        (1.0, 1, 0.0),
        (2.0, 0, 0.3 / 1.1),  # nine 1s and a 2: mean 1.1, 1/N sigma 0.3
        (2.0, 1, math.sqrt(0.1) / 1.1),  # the sample sigma: sqrt(0.9 / 9)
    ],
)
def test_one_straggler_cov(ratio: float, ddof: int, expected: float) -> None:
    assert one_straggler_cov(ratio, 10, ddof) == pytest.approx(expected)
    assert one_straggler_ratio(expected, 10, ddof) == pytest.approx(ratio)


def test_cov_ceiling_is_one_worker_taking_all_the_time() -> None:
    assert cov_ceiling(10, ddof=0) == pytest.approx(3.0)
    assert cov_ceiling(10, ddof=1) == pytest.approx(math.sqrt(10))
    assert one_straggler_ratio(3.0, 10, ddof=0) == math.inf


@pytest.mark.parametrize(
    ("worker_times", "tight"),
    [
        ((1,) * 9 + (2,), "upper"),  # one slow worker: max/mean 2/1.1
        ((2,) * 9 + (1,), "lower"),  # one fast worker: max/mean 2/1.9
        ((1, 2, 3, 4, 5, 6, 7, 8, 9, 10), None),
    ],
)
def test_max_over_mean_bounds_hold_and_are_tight(
    worker_times: tuple[float, ...], tight: str | None
) -> None:
    t = np.asarray(worker_times, dtype=np.float64)
    low, high = max_over_mean_bounds(float(t.std() / t.mean()), 10, ddof=0)
    ratio = float(t.max() / t.mean())
    assert low - 1e-12 <= ratio <= high + 1e-12
    if tight is not None:
        assert ratio == pytest.approx(high if tight == "upper" else low)


def test_parse_worker_times_keeps_only_complete_samples() -> None:
    text = (
        ",worker,gpu,time,batch_time_norm\n"
        "0,0,20,1,500\n1,1,20,1,1000\n2,0,20,11,400\n3,1,20,11,800\n4,1,20,21,900\n"
    )
    wt = parse_worker_times(text, "job_x")
    assert wt == WorkerTimes("job_x", 20, (1, 11), ((500.0, 1000.0), (400.0, 800.0)), 1)


def test_parse_worker_times_refuses_mixed_gpu_requests() -> None:
    with pytest.raises(ValueError, match="one GPU request"):
        parse_worker_times(",worker,gpu,time,batch_time_norm\n0,0,20,1,5\n1,1,50,1,6\n", "x")


def test_parse_cov_table_drops_the_empty_tail_of_short_jobs() -> None:
    traces = parse_cov_table(",0,1,2\njob_00,0.1,0.2,0.3\njob_01,0.5,,\n")
    assert traces == (CovTrace("job_00", (0.1, 0.2, 0.3)), CovTrace("job_01", (0.5,)))


def test_job_stragglers_on_a_hand_worked_table() -> None:
    wt = times([(1, 1, 2), (1, 1, 2), (1, 1, 3), (2, 1, 1)])
    s = job_stragglers(wt, SIMULATOR_STEP)
    assert s.samples == 4
    assert s.slowest_over_median.p50 == pytest.approx(2.0)
    assert s.slowest_over_median.max == pytest.approx(3.0)
    assert s.slowest_over_second == pytest.approx(2.0)  # 2/1, 2/1, 3/1, 2/1
    assert s.model_over_median == pytest.approx(9 / 4)  # slowest 2+2+3+2, medians 1 each
    assert s.mean_over_median == pytest.approx(17 / 12)  # means 4/3, 4/3, 5/3, 4/3
    assert s.model_over_mean == pytest.approx(27 / 17)
    assert s.barrier_violations == 0
    assert job_stragglers(wt, mean_step).barrier_violations == 4
    assert s.share_at_bytedance == 1.0
    assert (s.slowest_top1_share, s.slowest_top2_share) == (0.75, 1.0)  # worker 2, then 0
    assert s.slowest_repeat_share == pytest.approx(2 / 3)
    # worker means (1, 1, 2) then (1.5, 1, 2): ranks 0 1 2 and 1 0 2
    assert s.halves_rank_corr == pytest.approx(0.5)


def test_an_episode_is_slower_than_usual_not_always_slow() -> None:
    normal, slow = (1.5, 1, 1, 1), (1.5, 1, 1, 2)  # worker 0 is always 1.5x: no episode
    wt = times([normal, normal, slow, slow, slow, normal, normal])
    # in a slow sample the median is 1.25: worker 3 is 1.6x it, and usually 1x
    episode = longest_episode(wt)
    assert episode is not None
    assert (episode.worker, episode.start_s, episode.duration_s) == (3, 20, 30)
    assert episode.peak_over_usual == pytest.approx(1.6)
    assert longest_episode(times([normal] * 4)) is None


# ----------------------------------------------------------------- the shipped data


SHA256 = {
    "coefficient_variation.csv": "81a96c3e5cec9d5caff5df10cfd971ef79556319b0ce436e2eed6d08ae417fc4",
    "job_1_norm.csv": "6f555e44ababa68c25659f911eb28fa7658f7ff0b3c08161a57b3bce0bf0d2dd",
    "job_2_norm.csv": "c1945786e809ec0c204aa3f0e30d7dd3111234ef873707cb8304bdd290d433b2",
    "job_3_norm.csv": "47057a62829a1fbea6c90e43aeba53d4a9c2804c38ce31fd618d2426ef2b530b",
    "job_4_norm.csv": "eccd5b23e4480e585082ba4affecbcc240150a9dcfc69b237d4dcb28ad146bc6",
}


@pytest.mark.parametrize("name", sorted(SHA256))
def test_shipped_files_are_alibabas_unchanged(name: str) -> None:
    path = resources.files("fairlane_eval").joinpath("data", "pai_minibatch", name)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == SHA256[name]


def test_shipped_data_is_four_jobs_and_a_hundred_traces_of_ten_workers(
    pai: tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]],
) -> None:
    jobs, covs = pai
    assert [(wt.gpu_request_pct, len(wt.times[0])) for wt in jobs] == [
        (25, 10),
        (20, 10),
        (25, 10),
        (50, 10),
    ]
    assert len(covs) == 100
    assert all(1 <= len(t.cov) <= 2000 for t in covs)


def test_the_model_never_lets_a_job_step_before_its_slowest_worker(
    pai: tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]],
) -> None:
    """A synchronous step ends at a barrier that the slowest worker reaches last; the
    data's times are each worker's own, so the job's step is at least their max."""
    for wt in pai[0]:
        assert job_stragglers(wt, SIMULATOR_STEP).barrier_violations == 0, wt.job
        assert job_stragglers(wt, mean_step).barrier_violations == len(wt.times)


def test_the_model_charges_the_slowest_worker_and_nothing_the_data_cannot_show(
    pai: tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]],
) -> None:
    """The data has no communication time, so a model above the slowest worker would be
    inventing it; one below it would skip the barrier."""
    for wt in pai[0]:
        m = wt.array()
        slowest = m.max(axis=1).sum() / np.median(m, axis=1).sum()
        s = job_stragglers(wt, SIMULATOR_STEP)
        assert s.model_over_median == pytest.approx(slowest, rel=1e-9), wt.job


@pytest.mark.parametrize(
    ("job", "p50", "model", "mean"),
    [
        ("job_1", 1.101, 1.121, 1.009),
        ("job_2", 1.089, 1.092, 0.971),
        ("job_3", 1.111, 1.120, 1.013),
        ("job_4", 2.162, 2.801, 1.271),
    ],
)
def test_what_the_slowest_worker_costs_each_job(
    pai: tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]],
    job: str,
    p50: float,
    model: float,
    mean: float,
) -> None:
    """The numbers docs/evaluation-straggler.md quotes: on the ordinary jobs the model
    charges 9-12 % over the median worker where a mean would charge about nothing."""
    (wt,) = [w for w in pai[0] if w.job == job]
    s = job_stragglers(wt, SIMULATOR_STEP)
    assert s.slowest_over_median.p50 == pytest.approx(p50, abs=5e-4)
    assert s.model_over_median == pytest.approx(model, abs=5e-4)
    assert s.mean_over_median == pytest.approx(mean, abs=5e-4)


def test_the_slowest_worker_is_mostly_one_or_two_of_the_ten(
    pai: tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]],
) -> None:
    """Persistent, not transient: what lets placement avoid a straggler."""
    stats = {wt.job: job_stragglers(wt, SIMULATOR_STEP) for wt in pai[0]}
    assert stats["job_2"].slowest_top1_share > 0.95
    assert all(stats[j].slowest_top2_share > 0.79 for j in ("job_1", "job_2", "job_3"))
    assert [round(s.halves_rank_corr, 2) for s in stats.values()] == [0.77, 0.99, 0.30, 0.82]
    episode = longest_episode(pai[0][3])
    assert episode is not None
    assert (episode.worker, episode.start_s, episode.duration_s) == (5, 18711, 3110)


def test_the_cov_table_used_the_sample_std_not_the_readmes(
    pai: tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]],
) -> None:
    """Ten non-negative times cannot have a 1/N CoV above 3; 908 values are."""
    c = cov_stragglers(pai[1])
    assert c.above_population_ceiling == 908
    assert max(max(t.cov) for t in pai[1]) <= cov_ceiling(10, ddof=1)


def test_pal_spread_alone_gives_half_of_pais_straggler_penalty(
    pai: tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]],
) -> None:
    """Where the simulator differs: ten GPUs drawn from PAL's dedicated V100s, with no
    episodes, have a slowest GPU ~4.5 % behind the median; PAI's shared GPUs ~10 %."""
    gang = simulated_gang(np.random.default_rng(8), 10, 2000, SIMULATOR_STEP)
    assert 1.03 < gang.model_over_median.p50 < 1.06
    ordinary = [job_stragglers(wt, SIMULATOR_STEP) for wt in pai[0][:3]]
    excess = gang.model_over_median.p50 - 1
    assert all(s.slowest_over_median.p50 - 1 > 1.8 * excess for s in ordinary)
    c = cov_stragglers(pai[1])
    assert gang.median_cov < c.job_median_cov.p50 / 3
    assert c.job_median_cov.p25 > gang.median_cov * 2
