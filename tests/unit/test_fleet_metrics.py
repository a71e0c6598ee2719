"""The fleet as /metrics shows it: GPUs per filter state (every state present, so an
alert on one always has a series), health-gated GPUs, and every GPU's score."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, generate_latest

from fairlane_scheduler.adapters.fleet_metrics import STATES, FleetCollector
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import PlacementPolicy
from tests.factories import gpu_score

NOW = 1_700_000_000_000


def scrape(fleet: FleetView, allocated: set[str]) -> CollectorRegistry:
    registry = CollectorRegistry()
    policy = PlacementPolicy(threshold=0.65, stale_after_s=60)
    registry.register(FleetCollector(fleet, lambda: allocated, policy, None, lambda: NOW))
    return registry


def test_every_state_is_exported_with_its_count() -> None:
    fleet = FleetView()
    for i, score in enumerate([0.9, 0.9, 0.3]):
        fleet.apply(gpu_score(node="n", uuid=f"GPU-{i}", index=i, score=score, ts_ms=NOW))
    fleet.apply(
        gpu_score(
            node="n", uuid="GPU-3", index=3, score=0.0, ts_ms=NOW, components={"health_gate": 0.0}
        )
    )
    registry = scrape(fleet, {"GPU-1"})
    by_state = {
        state: registry.get_sample_value(
            "fairlane_scheduler_gpus", {"state": state.replace(" ", "_")}
        )
        for state in STATES
    }
    assert by_state == {
        "free": 1,
        "allocated": 1,
        "cordoned": 0,
        "stale": 0,
        "score below threshold": 2,
        "cooling": 0,
    }
    assert registry.get_sample_value("fairlane_scheduler_gpus_health_gated") == 1
    labels = {"node": "n", "gpu": "2", "uuid": "GPU-2", "model": "NVIDIA H100 80GB HBM3"}
    assert registry.get_sample_value("fairlane_scheduler_gpu_score", labels) == 0.3


def test_an_empty_fleet_still_exports_every_state() -> None:
    text = generate_latest(scrape(FleetView(), set())).decode()
    for state in STATES:
        assert f'fairlane_scheduler_gpus{{state="{state.replace(" ", "_")}"}} 0.0' in text
