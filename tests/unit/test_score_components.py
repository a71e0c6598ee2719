"""Table-driven tests of each score formula."""

import math

import numpy as np
import pytest

from fairlane_scoring.allocation import Held
from fairlane_scoring.components import (
    bandwidth_headroom,
    clock_health,
    component_scores,
    compute_headroom,
    health_gate,
    memory_headroom,
    power_headroom,
    thermal_headroom,
)
from fairlane_scoring.config import COMPONENTS, ScoreConfig
from fairlane_scoring.decay import decay_weights, decayed_mean
from tests.factories import gpu_sample

HW_THERMAL, IDLE = 0x40, 0x1


@pytest.mark.parametrize(
    ("sm", "max_", "reasons", "expected"),
    [
        (1980, 1980, 0, 1.0),
        (990, 1980, 0, 1.0),  # low clock without a reason: power saving, not a slowdown
        (990, 1980, IDLE, 1.0),  # idle is not a slowdown
        (990, 1980, HW_THERMAL, 0.5),
        (990, 1980, HW_THERMAL | IDLE, 0.5),
        (None, 1980, HW_THERMAL, None),
        (990, None, HW_THERMAL, None),
    ],
)
def test_clock_health(
    sm: float | None, max_: float | None, reasons: int, expected: float | None
) -> None:
    assert clock_health(sm, max_, reasons) == expected


@pytest.mark.parametrize(
    ("temp", "slowdown", "expected"),
    [(40, 90, 1.0), (70, 90, 1.0), (80, 90, 0.5), (90, 90, 0.0), (95, 90, 0.0), (None, 90, None)],
)
def test_thermal_headroom(temp: float | None, slowdown: float, expected: float | None) -> None:
    assert thermal_headroom(temp, slowdown, margin_c=20.0) == expected


@pytest.mark.parametrize(
    ("sm_active", "util", "expected"),
    [(0.25, 100.0, 0.75), (None, 40.0, 0.6), (None, None, None)],
)
def test_compute_headroom_prefers_sm_activity(
    sm_active: float | None, util: float | None, expected: float | None
) -> None:
    assert compute_headroom(sm_active, util) == pytest.approx(expected)


def test_load_headrooms() -> None:
    assert memory_headroom(20, 80) == pytest.approx(0.75)
    assert memory_headroom(None, 80) is None
    assert bandwidth_headroom(30.0) == pytest.approx(0.7)
    assert bandwidth_headroom(None) is None
    assert power_headroom(350.0, 700.0) == pytest.approx(0.5)
    assert power_headroom(350.0, None) is None


@pytest.mark.parametrize(
    ("sample", "previous_ecc", "expected"),
    [
        (gpu_sample(), 0, 1.0),
        (gpu_sample(healthy=False), 0, 0.0),
        (gpu_sample(remapped_rows_pending=True), 0, 0.0),
        (gpu_sample(ecc_uncorrected_volatile=3), 2, 0.0),  # new errors
        (gpu_sample(ecc_uncorrected_volatile=3), 3, 1.0),  # old errors, nothing new
        (gpu_sample(ecc_uncorrected_volatile=3), None, 1.0),  # first sample: no baseline
    ],
)
def test_health_gate(sample, previous_ecc: int | None, expected: float) -> None:  # type: ignore[no-untyped-def]
    assert health_gate(sample, previous_ecc) == expected


def test_component_scores_follow_the_component_order() -> None:
    sample = gpu_sample(sm_active=None, gpu_util_pct=40.0, mem_util_pct=None)
    got = dict(zip(COMPONENTS, component_scores(sample, thermal_margin_c=20.0), strict=True))
    assert got["compute"] == pytest.approx(0.6)
    assert got["bandwidth"] is None
    assert got["clock"] == 1.0


def test_default_decay_puts_70_percent_of_weight_in_the_last_5_minutes() -> None:
    config = ScoreConfig()
    k = config.decay_rate_per_s
    assert 1 - math.exp(-k * 300) == pytest.approx(0.70)
    # DESIGN.md: about 0.887 per 30 s, inside the 0.8-0.95 band.
    assert math.exp(-k * 30) == pytest.approx(0.887, abs=0.001)


def test_decay_weights_use_age_in_seconds_and_drop_old_samples() -> None:
    ages = np.array([0.0, 30.0, 600.0, 601.0, -1.0])
    w = decay_weights(ages, rate_per_s=0.01, history_s=600.0)
    assert w[0] == 1.0
    assert w[1] == pytest.approx(math.exp(-0.3))
    assert w[2] > 0
    assert w[3] == 0.0
    assert w[4] == 0.0  # a sample from the future does not count


def test_decayed_mean_weights_recent_samples_more() -> None:
    ts = np.array([0.0, 300_000.0])
    mean, n = decayed_mean(
        ts, np.array([0.0, 1.0]), now_ms=300_000, rate_per_s=0.004, history_s=600
    )
    assert n == 2
    assert mean == pytest.approx(1 / (1 + math.exp(-0.004 * 300)))
    assert math.isnan(decayed_mean(ts, np.array([0.0, 1.0]), 10**9, 0.004, 600)[0])


@pytest.mark.parametrize(
    ("sm_active", "util", "held", "expected"),
    [
        (0.3, None, 0.0, 0.7),  # nothing held: all load counts
        (0.3, None, 0.5, 1.0),  # a tenant inside its half: no interference
        (0.8, None, 0.5, 0.7),  # 0.3 beyond the tenants' half counts
        (None, 80.0, 0.5, 0.7),  # utilization when SM activity is absent
        (1.0, None, 1.0, 1.0),
    ],
)
def test_compute_headroom_counts_only_load_beyond_the_held_share(
    sm_active: float | None, util: float | None, held: float, expected: float
) -> None:
    assert compute_headroom(sm_active, util, held) == pytest.approx(expected)


def test_memory_bandwidth_and_power_are_discounted_by_what_tenants_hold() -> None:
    gib = 2**30
    assert memory_headroom(30 * gib, 80 * gib, 20 * gib) == pytest.approx(1 - 10 / 80)
    assert memory_headroom(10 * gib, 80 * gib, 20 * gib) == 1.0
    assert bandwidth_headroom(60.0, 0.25) == pytest.approx(0.65)
    assert power_headroom(350.0, 700.0, 0.25) == pytest.approx(0.75)
    sample = gpu_sample(sm_active=0.5, mem_used_bytes=40 * gib, mem_util_pct=50.0)
    whole = dict(zip(COMPONENTS, component_scores(sample, 20.0), strict=True))
    shared = dict(zip(COMPONENTS, component_scores(sample, 20.0, Held(0.5, 40 * gib)), strict=True))
    assert (whole["compute"], shared["compute"]) == (0.5, 1.0)
    assert shared["memory"] == 1.0
    assert (whole["clock"], whole["thermal"]) == (shared["clock"], shared["thermal"])
