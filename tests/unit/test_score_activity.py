"""The activity a score record carries beside its (possibly masked) components."""

import numpy as np
import pytest

from fairlane_scorer.core.records import GpuLabels, score_record
from fairlane_scorer.core.window import RECENT_COLUMNS, GpuWindow, accept_sample
from fairlane_scoring.activity import gpu_activity
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import ScoreResult
from tests.factories import gpu_sample

T0 = 1_700_000_000_000


@pytest.mark.parametrize(
    ("sm_active", "gpu_util_pct", "expected"),
    [
        (0.0, 0.0, 0.0),
        (0.02, 40.0, 0.4),  # a kernel ran for 40 % of the interval on few SMs: busy
        (0.6, 3.0, 0.6),
        (None, 3.0, 0.03),  # before Hopper: utilization alone
        (0.25, None, 0.25),
        (None, None, None),
    ],
)
def test_activity_is_the_larger_of_sm_activity_and_utilization(
    sm_active: float | None, gpu_util_pct: float | None, expected: float | None
) -> None:
    sample = gpu_sample(sm_active=sm_active, gpu_util_pct=gpu_util_pct)
    assert gpu_activity(sample) == pytest.approx(expected)


def _result(*, stale: bool) -> ScoreResult:
    # A held GPU: its load components masked, so only ``activity`` says it is busy.
    components = {"clock": 1.0, "compute": None, "memory": None}
    return ScoreResult(0.9, components, 5, stale, T0)


def test_a_fresh_record_carries_the_newest_samples_activity_a_stale_one_none() -> None:
    labels = GpuLabels("node-a", 0, "NVIDIA H100 80GB HBM3", None, 0.72)
    assert score_record("GPU-1", labels, _result(stale=False)).activity == 0.72
    assert score_record("GPU-1", labels, _result(stale=True)).activity is None


def test_a_window_remembers_its_newest_samples_activity() -> None:
    config = ScoreConfig()
    window: GpuWindow | None = None
    for k, util in enumerate((90.0, 2.0)):
        window = accept_sample(
            window,
            "node-a",
            T0 + k * 30_000,
            gpu_sample(sm_active=None, gpu_util_pct=util),
            load_since_ms=np.inf,
            config=config,
        )
    assert window is not None
    assert window.activity == pytest.approx(0.02)
    assert window.recent.shape[1] == len(RECENT_COLUMNS)
