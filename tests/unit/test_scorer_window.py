"""The streaming window state must give the reference score. (The full hypothesis
parity suite arrives with the scorer issue; these are the skeleton's cases.)"""

from dataclasses import replace

import pytest

from fairlane_events.records import GpuSample
from fairlane_scorer.core.window import GpuWindow, accept_sample, score_window, should_emit
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import reference_score
from tests.factories import gpu_sample

CONFIG = ScoreConfig(interval_s=30.0)
T0 = 1_700_000_000_000


def stream(history: list[tuple[int, GpuSample]]) -> GpuWindow | None:
    window = None
    for ts, sample in history:
        window = accept_sample(window, "node-a", ts, sample, CONFIG) or window
    return window


HISTORIES = {
    "steady": [(T0 + i * 30_000, gpu_sample()) for i in range(10)],
    "throttling": [
        (T0 + i * 30_000, gpu_sample(sm_clock_mhz=990.0, clock_event_reasons=0x40, temp_c=89.0))
        for i in range(5)
    ],
    "gaps and duplicates": [
        (T0, gpu_sample(gpu_util_pct=50.0, sm_active=None)),
        (T0, gpu_sample(gpu_util_pct=0.0)),  # duplicate ts: ignored
        (T0 + 400_000, gpu_sample()),
        (T0 + 350_000, gpu_sample(sm_active=1.0)),  # older than the last: ignored
        (T0 + 900_000, gpu_sample(sm_active=0.5)),  # the first sample left the window
    ],
    "new ecc errors": [
        (T0, gpu_sample(ecc_uncorrected_volatile=1)),
        (T0 + 30_000, gpu_sample(ecc_uncorrected_volatile=2)),
        (T0 + 60_000, gpu_sample(ecc_uncorrected_volatile=2)),
    ],
}


@pytest.mark.parametrize("name", sorted(HISTORIES))
def test_streaming_window_equals_reference(name: str) -> None:
    history = HISTORIES[name]
    now = max(ts for ts, _ in history)
    window = stream(history)
    assert window is not None
    got, want = score_window(window, now, CONFIG), reference_score(history, now, CONFIG)
    assert got.score == pytest.approx(want.score, abs=1e-12)
    assert got.samples_in_window == want.samples_in_window
    assert got.ts_ms == want.ts_ms


def test_window_survives_its_table_encoding() -> None:
    window = stream(HISTORIES["gaps and duplicates"])
    assert window is not None
    assert GpuWindow.from_dict(window.to_dict()) == window


def test_duplicate_sample_is_not_accepted() -> None:
    window = stream(HISTORIES["steady"])
    assert accept_sample(window, "node-a", T0, gpu_sample(), CONFIG) is None


def test_throttled_gpu_scores_below_threshold_and_healthy_above() -> None:
    now = T0 + 9 * 30_000
    assert reference_score(HISTORIES["steady"], now, CONFIG).score > 0.95
    throttled = reference_score(HISTORIES["throttling"], T0 + 4 * 30_000, CONFIG)
    assert throttled.score < CONFIG.threshold


def test_stale_after_three_intervals() -> None:
    history = HISTORIES["steady"][:1]
    assert not reference_score(history, T0 + 90_000, CONFIG).stale
    assert reference_score(history, T0 + 90_001, CONFIG).stale


def test_emission_on_first_score_move_and_heartbeat_only() -> None:
    window = stream(HISTORIES["steady"])
    assert window is not None
    now = window.ts_ms[-1]
    result = score_window(window, now, CONFIG)
    assert should_emit(window, result, now, CONFIG)
    emitted = replace(window, emitted_score=result.score, emitted_stale=False, emitted_at_ms=now)
    assert not should_emit(emitted, result, now + 1000, CONFIG)
    assert should_emit(emitted, replace(result, score=result.score - 0.02), now + 1000, CONFIG)
    assert should_emit(emitted, replace(result, stale=True), now + 1000, CONFIG)
    assert should_emit(emitted, result, now + 60_000, CONFIG)
