"""The learned speed (fairlane_scoring.learned_speed): what one report teaches, how fast a
GPU's speed is learned, how a change is found, and what stands behind an estimate."""

from __future__ import annotations

import math
import statistics

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from fairlane_scoring.learned_speed import (
    LearnerConfig,
    ProgressReport,
    RankReport,
    SpeedState,
    clock_prior,
    estimate,
    leave_one_out_medians,
    observe,
    observe_all,
    peer_relative,
    rank_observations,
)

CONFIG = LearnerConfig()
MINUTE_MS = 60_000


def _report(speeds: dict[str, float], cost_s: float = 0.2, job_class: str = "cb") -> ProgressReport:
    """A one-minute window of a job whose ranks' compute time is cost / their GPU's speed."""
    ranks = tuple(RankReport(gpu, cost_s / speed) for gpu, speed in speeds.items())
    return ProgressReport(job_class, 60.0, ranks)


@given(st.lists(st.floats(-5, 5, allow_nan=False), min_size=2, max_size=40))
def test_leave_one_out_medians_are_the_others_medians(values: list[float]) -> None:
    expected = [statistics.median(values[:i] + values[i + 1 :]) for i in range(len(values))]
    assert leave_one_out_medians(values) == pytest.approx(expected, abs=1e-12)


def test_a_rank_slower_than_its_peers_observes_its_gpus_speed() -> None:
    report = _report({"a": 1.0, "b": 1.0, "c": 1.0, "slow": 0.8})
    observed = rank_observations(report, [0.0] * 4, CONFIG)
    assert observed[3] == pytest.approx(math.log(0.8))
    assert observed[:3] == pytest.approx([0.0] * 3)


def test_a_job_wholly_on_known_slow_gpus_is_not_mistaken_for_a_costly_job() -> None:
    """Two GPUs known to run at 0.5 and one unknown GPU in a job: the unknown one is as
    fast as the typical GPU, and says so, although it is the job's fastest rank."""
    report = _report({"s1": 0.5, "s2": 0.5, "new": 1.0})
    observed = rank_observations(report, [math.log(0.5), math.log(0.5), 0.0], CONFIG)
    assert observed[2] == pytest.approx(0.0)


def test_the_model_speed_is_not_taken_for_the_gpus_own() -> None:
    """An A100 at twice a V100's catalogue speed, in one gang: neither GPU is odd."""
    ranks = (RankReport("v100", 0.2, model_speed=1.0), RankReport("a100", 0.1, model_speed=2.0))
    observed = rank_observations(ProgressReport("cb", 60.0, ranks), [0.0, 0.0], CONFIG)
    assert observed == pytest.approx([0.0, 0.0])


def test_a_one_rank_job_or_a_stalled_rank_teaches_nothing() -> None:
    assert observe({}, _report({"alone": 0.5}), MINUTE_MS, CONFIG) == {}
    stalled = _report({"a": 1.0, "b": 1.0, "c": 0.2})  # 5x: a checkpoint, not a GPU
    assert set(observe({}, stalled, MINUTE_MS, CONFIG)) == {("a", "cb"), ("b", "cb")}


def test_without_reports_the_estimate_is_the_prior_with_no_confidence() -> None:
    learned = estimate(None, 0, CONFIG, prior=math.log(0.9))
    assert learned.speed == pytest.approx(0.9)
    assert learned.confidence == 0.0
    assert learned.low < 0.9 < learned.high


@pytest.mark.parametrize(
    ("busy_mhz", "median_mhz", "expected"),
    [
        (1530.0, 1530.0, 1.0),
        (1377.0, 1530.0, 0.9**1.09),
        (None, 1530.0, 1.0),
        (1530.0, None, 1.0),
        (0.0, 1530.0, 1.0),
    ],
)
def test_clock_prior_is_the_busy_clock_ratio_to_the_power_1_09(
    busy_mhz: float | None, median_mhz: float | None, expected: float
) -> None:
    assert math.exp(clock_prior(busy_mhz, median_mhz, CONFIG)) == pytest.approx(expected)


def _run_minutes(
    states: dict[tuple[str, str], SpeedState],
    true_speeds: dict[str, float],
    minutes: range,
    rng: np.random.Generator,
    noise: float = 0.03,
) -> None:
    """One 8-rank job per minute: seven peers and the GPU under test, ``noise`` (log) on
    each rank's compute time."""
    reports = []
    for minute in minutes:
        ranks = tuple(
            RankReport(gpu, 0.2 / speed * math.exp(rng.normal(0.0, noise)))
            for gpu, speed in true_speeds.items()
        )
        reports.append((minute * MINUTE_MS, ProgressReport("cb", 60.0, ranks)))
    observe_all(states, reports, CONFIG)


def _fleet(under_test: float) -> dict[str, float]:
    return {**{f"peer{i}": 1.0 for i in range(7)}, "new": under_test}


def _learned(
    states: dict[tuple[str, str], SpeedState], now_ms: int, gpu: str = "new", job_class: str = "cb"
) -> tuple[float, float, float]:
    """(speed, low, high) of ``gpu`` against its peers' median (``peer_relative``)."""
    speeds = {g: estimate(s, now_ms, CONFIG) for (g, c), s in states.items() if c == job_class}
    scale = speeds[gpu].speed / peer_relative({g: e.speed for g, e in speeds.items()})[gpu]
    return speeds[gpu].speed / scale, speeds[gpu].low / scale, speeds[gpu].high / scale


@pytest.mark.parametrize("true_speed", [0.46, 0.8, 0.93, 1.0, 1.06])
def test_a_new_gpu_is_learned_within_3_percent_in_30_job_minutes(true_speed: float) -> None:
    states: dict[tuple[str, str], SpeedState] = {}
    _run_minutes(states, _fleet(true_speed), range(1, 31), np.random.default_rng(7))
    speed, low, high = _learned(states, 30 * MINUTE_MS)
    assert speed == pytest.approx(true_speed, rel=0.03)
    assert low <= true_speed <= high
    learned = estimate(states[("new", "cb")], 30 * MINUTE_MS, CONFIG)
    assert learned.confidence > 0.85
    assert learned.reports == 30


def test_a_gpu_that_recovers_is_trusted_again_within_30_minutes() -> None:
    rng = np.random.default_rng(11)
    states: dict[tuple[str, str], SpeedState] = {}
    _run_minutes(states, _fleet(0.5), range(1, 8 * 60), rng)  # a working day slow
    assert _learned(states, 8 * 60 * MINUTE_MS)[0] < 0.52
    _run_minutes(states, _fleet(1.0), range(8 * 60, 8 * 60 + 30), rng)  # repaired
    assert _learned(states, (8 * 60 + 30) * MINUTE_MS)[0] == pytest.approx(1.0, rel=0.03)
    assert states[("new", "cb")].changes == 1


def test_noise_alone_is_not_called_a_change() -> None:
    states: dict[tuple[str, str], SpeedState] = {}
    _run_minutes(states, _fleet(0.9), range(1, 24 * 60), np.random.default_rng(3), noise=0.05)
    assert states[("new", "cb")].changes == 0
    assert all(states[(f"peer{i}", "cb")].changes == 0 for i in range(7))


def test_one_outlier_report_moves_a_learned_speed_little() -> None:
    states: dict[tuple[str, str], SpeedState] = {}
    _run_minutes(states, _fleet(0.9), range(1, 120), np.random.default_rng(5))
    before = estimate(states[("new", "cb")], 120 * MINUTE_MS, CONFIG).speed
    observe_all(states, [(120 * MINUTE_MS, _report({**_fleet(1.0), "new": 0.4}))], CONFIG)
    after = estimate(states[("new", "cb")], 120 * MINUTE_MS, CONFIG).speed
    assert after == pytest.approx(before, rel=0.01)


def test_classes_are_learned_apart() -> None:
    states: dict[tuple[str, str], SpeedState] = {}
    slow_compute = _report(_fleet(0.7), job_class="compute-bound")
    fine_memory = _report(_fleet(1.0), job_class="memory-bound")
    for minute in range(1, 31):
        observe_all(states, [(minute * MINUTE_MS, slow_compute)], CONFIG)
        observe_all(states, [(minute * MINUTE_MS, fine_memory)], CONFIG)
    now = 30 * MINUTE_MS
    assert _learned(states, now, job_class="compute-bound")[0] == pytest.approx(0.7, rel=0.03)
    assert _learned(states, now, job_class="memory-bound")[0] == pytest.approx(1.0, rel=0.03)


def test_an_idle_gpu_forgets_slowly() -> None:
    states: dict[tuple[str, str], SpeedState] = {}
    _run_minutes(states, _fleet(0.8), range(1, 61), np.random.default_rng(9))
    hour_later = estimate(states[("new", "cb")], 61 * MINUTE_MS, CONFIG)
    month_later = estimate(states[("new", "cb")], 30 * 24 * 60 * MINUTE_MS, CONFIG)
    assert hour_later.confidence > 0.9
    assert month_later.confidence < 0.2
    assert 0.8 < hour_later.speed < month_later.speed < 1.0  # back to the prior as they age


def test_one_long_window_weighs_no_more_than_ten_job_minutes() -> None:
    day = _report(_fleet(0.5))
    day = ProgressReport(day.job_class, 24 * 3600.0, day.ranks)
    learned = observe({}, day, MINUTE_MS, CONFIG)[("new", "cb")]
    assert learned.stats.weight == pytest.approx(10.0)


def test_invalid_configs_are_refused() -> None:
    with pytest.raises(ValueError, match="change_z_cap"):
        LearnerConfig(change_z_cap=1.0, change_drift=1.0)
    with pytest.raises(ValueError, match="prior_sigma"):
        LearnerConfig(prior_sigma=0)
