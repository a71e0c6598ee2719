"""The evaluation's telemetry and fault model: lazy sampling is exact, episodes as drawn."""

from __future__ import annotations

import numpy as np
import pytest

from fairlane_eval.core.cluster import HiddenFleet, HiddenGpu
from fairlane_eval.core.faults import DEFAULT_FAULTS, FaultModel, draw_episodes
from fairlane_eval.core.metrics import contention
from fairlane_eval.core.telemetry import ScoreKeeper, tick_draws
from fairlane_events.gpu_models import CATALOG
from fairlane_scoring.config import ScoreConfig
from fairlane_sim.scenario import ScenarioEvent

CONFIG = ScoreConfig(interval_s=60.0)


def test_a_ticks_draws_do_not_depend_on_the_range_they_are_drawn_in() -> None:
    wide = tick_draws(7, 3, 100, 140)
    assert np.array_equal(wide[10:12], tick_draws(7, 3, 110, 111))
    assert not np.array_equal(wide[0], tick_draws(7, 4, 100, 100)[0])  # another GPU


def troubled_gpu() -> HiddenFleet:
    gpu = HiddenGpu(0, "node-0000", 0, "GPU-0", CATALOG["A100-80GB"], 0.97, 40.0)
    episodes = [
        ScenarioEvent("thermal", start_s=1200.0, duration_s=1800.0, ramp_s=120.0),
        ScenarioEvent("ecc", start_s=4000.0, duration_s=600.0),
        ScenarioEvent("spike", probability=0.2),
    ]
    return HiddenFleet([gpu], [episodes])


@pytest.mark.parametrize("asked", [[10, 11, 40, 90, 91, 130], [25, 26, 27, 120]])
def test_lazy_sampling_gives_the_scores_dense_sampling_gives(asked: list[int]) -> None:
    fleet = troubled_gpu()
    dense, lazy = ScoreKeeper(fleet, CONFIG, 5), ScoreKeeper(fleet, CONFIG, 5)
    for keeper in (dense, lazy):  # a job on it from 50 to 70 min: load masked meanwhile
        keeper.job_started(0, 3000.0)
        keeper.job_ended(0, 4200.0)
    every = {tick: dense.advance(0, tick)[0] for tick in range(max(asked) + 1)}
    for tick in asked:
        assert lazy.advance(0, tick)[-1] == every[tick]
    assert lazy.samples_taken < dense.samples_taken


def test_no_rate_no_episodes_and_counts_follow_the_rates() -> None:
    rng = np.random.default_rng(0)
    assert draw_episodes(rng, 100, 30 * 86_400, FaultModel(rate_scale=0)) == [[]] * 100
    episodes = draw_episodes(rng, 1000, 30 * 86_400, FaultModel(rate_scale=10))
    for kind, spec in DEFAULT_FAULTS.items():
        drawn = [e for per_gpu in episodes for e in per_gpu if e.kind == kind]
        expected = spec.rate_per_gpu_day * 10 * 30 * 1000
        assert abs(len(drawn) - expected) < 5 * np.sqrt(expected) + 1, kind
        durations = [e.duration_s or 0 for e in drawn]
        assert spec.min_s <= min(durations) <= max(durations) <= spec.max_s
    starts = [e.start_s for per_gpu in episodes for e in per_gpu]
    assert 0 <= min(starts) <= max(starts) < 30 * 86_400


def test_contention_is_the_average_number_of_jobs_present_over_each_life() -> None:
    # a: 0-10, b: 5-15. Each spends 5 s alone and 5 s with the other: 1.5 on average.
    average = contention(np.array([0.0, 5.0]), np.array([10.0, 15.0]))
    assert average == pytest.approx([1.5, 1.5])
    assert contention(np.array([0.0]), np.array([4.0])) == pytest.approx([1.0])
