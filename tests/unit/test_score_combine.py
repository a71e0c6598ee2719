"""Table-driven tests of the family means and the instant score."""

import pytest

from fairlane_scoring.combine import family_mean, instant_score
from fairlane_scoring.config import ScoreConfig

WEIGHTS = ScoreConfig().component_weights

N = None  # a component the GPU does not report

# clock, thermal, compute, memory, bandwidth, power
IDLE = (1.0, 1.0, 1.0, 1.0, 1.0, 0.9)
HALF_CLOCK_COOL = (0.5, 1.0, 1.0, 1.0, 1.0, 0.9)
HALF_CLOCK_HOT = (0.5, 0.0, 1.0, 1.0, 1.0, 0.9)
OUTSIDE_FULL_LOAD = (1.0, 1.0, 0.0, 0.5, 0.4, 0.3)
HOT_NOT_THROTTLED = (1.0, 0.0, 1.0, 1.0, 1.0, 0.9)
NOTHING = (N, N, N, N, N, N)
HEALTH_ONLY = (0.5, 1.0, N, N, N, N)


def _h(c: float, t: float) -> float:
    return (8 * c + 1 * t) / 9


def _l(cp: float, m: float, b: float, p: float) -> float:
    return (4 * cp + 2 * m + b + p) / 8


@pytest.mark.parametrize(
    ("components", "load_counted", "expected"),
    [
        (IDLE, True, _l(1, 1, 1, 0.9)),
        (HALF_CLOCK_COOL, True, _h(0.5, 1) * _l(1, 1, 1, 0.9)),
        (HALF_CLOCK_HOT, True, _h(0.5, 0) * _l(1, 1, 1, 0.9)),
        (OUTSIDE_FULL_LOAD, True, _l(0, 0.5, 0.4, 0.3)),
        (OUTSIDE_FULL_LOAD, False, 1.0),  # our own job's load: masked, health counts
        (HOT_NOT_THROTTLED, True, _h(1, 0) * _l(1, 1, 1, 0.9)),
        (HEALTH_ONLY, True, _h(0.5, 1)),  # renormalised over what is reported
        (NOTHING, True, 0.0),  # no evidence is not good evidence
    ],
)
def test_instant_score_is_health_mean_times_load_mean(
    components: tuple[float | None, ...], load_counted: bool, expected: float
) -> None:
    assert instant_score(components, load_counted, WEIGHTS) == pytest.approx(expected)


def test_free_gpu_at_half_clock_is_below_threshold_and_idle_above() -> None:
    threshold = ScoreConfig().threshold
    idle, half_clock, loaded = (
        instant_score(c, True, WEIGHTS) for c in (IDLE, HALF_CLOCK_COOL, OUTSIDE_FULL_LOAD)
    )
    assert idle > 0.95
    assert half_clock < threshold  # the weighted mean of all six would give about 0.8
    assert loaded < threshold


@pytest.mark.parametrize(
    ("values", "weights", "expected"),
    [
        ([1.0, 0.0], [3.0, 1.0], 0.75),
        ([N, 0.0], [3.0, 1.0], 0.0),
        ([0.5, N], [0.0, 1.0], None),  # only a zero weight present
    ],
)
def test_family_mean_renormalises_over_present_components(
    values: list[float | None], weights: list[float], expected: float | None
) -> None:
    assert family_mean(values, weights) == pytest.approx(expected)
