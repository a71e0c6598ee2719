"""The causal Hampel filter, formula by table and behaviour on streams."""

import math

import pytest

from fairlane_scoring.outliers import filter_components, hampel


@pytest.mark.parametrize(
    ("window", "expected"),
    [
        ([0.0, 0.0, 0.0, 0.0, 1.0], 0.0),  # isolated spike: replaced by the median
        ([0.0, 0.0, 0.0, 1.0, 1.0], 0.0),  # second sample of a change: still held
        ([0.0, 0.0, 1.0, 1.0, 1.0], 1.0),  # third: the median moved, the change passes
        ([0.5, 0.52, 0.48, 0.5, 0.6], 0.6),  # within the floor: a wobble, not a spike
        ([0.2, 0.8, 0.2, 0.8, 0.5], 0.5),  # noisy history: a wide scale
        ([0.7], 0.7),  # nothing to compare with
    ],
)
def test_hampel_replaces_outliers_with_the_median(window: list[float], expected: float) -> None:
    assert hampel(window, n_sigma=3.0, min_scale=0.05) == pytest.approx(expected)


def _row(clock: float | None, compute: float | None) -> tuple[float | None, ...]:
    return (clock, None, compute, None, None, None)


def test_filter_components_keeps_absent_components_absent() -> None:
    history = [(1, _row(1.0, None)), (2, _row(1.0, 0.5)), (3, _row(0.0, None))]
    assert filter_components(history, -math.inf, 3.0, 0.05) == _row(1.0, None)


def test_filter_components_windows_each_component_over_its_own_values() -> None:
    values = [0.2, None, 0.2, 0.2, 0.9]
    history = [(ts, _row(1.0, v)) for ts, v in enumerate(values)]
    assert filter_components(history, -math.inf, 3.0, 0.05) == _row(1.0, 0.2)


def test_load_window_restarts_where_the_load_history_does() -> None:
    history = [(ts, _row(0.5, 0.0)) for ts in range(4)] + [(4, _row(1.0, 1.0))]
    # Health keeps its whole window (a clock jump is held); load starts afresh at ts 4.
    assert filter_components(history, 4, 3.0, 0.05) == _row(0.5, 1.0)
