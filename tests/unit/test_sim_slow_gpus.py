"""Slow-but-unthrottled simulated GPUs: slow for some job classes, invisible in samples."""

from __future__ import annotations

from dataclasses import replace

import pytest

from fairlane_sim.fleet import ANY_CLASS, FleetSimulator, FleetSpec

SPEC = FleetSpec(nodes=4, gpus_per_node=8, degraded_fraction=0.1, seed=11)


def test_slow_gpus_leave_every_sample_as_it_was() -> None:
    plain = FleetSimulator(SPEC)
    slowed = FleetSimulator(replace(SPEC, slow_fraction=0.25))
    assert len(slowed.slow) == 8
    for ts_ms in range(1_700_000_000_000, 1_700_000_300_000, 30_000):
        assert slowed.sample(ts_ms) == plain.sample(ts_ms)


def test_a_slow_gpu_is_slow_under_its_classes_only() -> None:
    fleet = FleetSimulator(replace(SPEC, slow_fraction=0.25, slow_speed=0.4))
    slow = next(iter(fleet.slow))
    healthy = next(u for u in fleet.hidden_speeds() if u not in fleet.slow)
    base = fleet.job_speed(slow, "memory-bound")
    assert fleet.job_speed(slow, "compute-bound") == pytest.approx(0.4 * base)
    assert 0.8 < base < 1.2
    assert 0.8 < fleet.job_speed(healthy, "compute-bound") < 1.2
    speeds = fleet.hidden_speeds()
    assert speeds[slow] == {
        "compute-bound": fleet.job_speed(slow, "compute-bound"),
        ANY_CLASS: base,
    }


def test_the_slow_draw_is_seeded() -> None:
    spec = replace(SPEC, slow_fraction=0.1)
    assert FleetSimulator(spec).slow == FleetSimulator(spec).slow
    assert FleetSimulator(spec).slow != FleetSimulator(replace(spec, seed=12)).slow


@pytest.mark.parametrize(
    "overrides",
    [{"slow_fraction": 1.5}, {"slow_speed": 0.0}, {"slow_speed": 1.2}, {"slow_classes": ("*",)}],
    ids=repr,
)
def test_impossible_slowness_is_refused(overrides: dict[str, object]) -> None:
    with pytest.raises(ValueError, match=r"slow|class"):
        replace(SPEC, **overrides)  # type: ignore[arg-type]
