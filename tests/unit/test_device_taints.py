"""Which DeviceTaintRules Fairlane wants, from the fleet view and the GPU driver's
ResourceSlices, and how it gets there from what exists (pure)."""

from __future__ import annotations

from typing import Any

from fairlane_scheduler.core.device_taints import (
    TAINT_KEY,
    Device,
    desired_rules,
    devices_of,
    plan,
)
from fairlane_scheduler.core.placement import PlacementPolicy
from tests.factories import gpu_score
from tests.unit.test_placement import NOW, fleet_of, node

POLICY = PlacementPolicy(threshold=0.65, stale_after_s=90)


def nvidia_slice(pool: str, uuids: list[str], driver: str = "gpu.nvidia.com") -> dict[str, Any]:
    devices = [
        {"name": f"gpu-{i}", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": u}}}
        for i, u in enumerate(uuids)
    ]
    mig = {
        "name": "gpu-0-mig-9-4-4",
        "attributes": {"uuid": {"string": "MIG-1"}, "parentUUID": {"string": uuids[0]}},
    }
    return {"spec": {"driver": driver, "pool": {"name": pool}, "devices": [*devices, mig]}}


def test_devices_are_read_from_the_nvidia_drivers_slices_only() -> None:
    slices = [nvidia_slice("n", ["n-0", "n-1"]), nvidia_slice("x", ["x-0"], driver="other.io")]
    assert devices_of(slices) == [
        Device("gpu.nvidia.com", "n", "gpu-0", "n-0", "n"),
        Device("gpu.nvidia.com", "n", "gpu-1", "n-1", "n"),
        Device("gpu.nvidia.com", "n", "gpu-0-mig-9-4-4", "n-0", "n"),  # held out with its GPU
    ]


def test_held_out_gpus_get_a_no_schedule_rule_saying_why() -> None:
    fleet = fleet_of(node("n", [0.9, 0.4, 0.0, 0.9]))
    fleet.apply(gpu_score(node="n", uuid="n-3", index=3, score=0.9, stale=True, ts_ms=NOW))
    devices = devices_of([nvidia_slice("n", ["n-0", "n-1", "n-2", "n-3", "unknown"])])
    rules = desired_rules(fleet, POLICY, devices, NOW)
    by_device = {r["deviceSelector"]["device"]: r["taint"] for r in rules.values()}
    assert set(by_device) == {"gpu-1", "gpu-2", "gpu-3"}  # the good and the unknown: none
    assert by_device["gpu-1"] == {
        "key": TAINT_KEY,
        "value": "below-threshold_score-0.40",
        "effect": "NoSchedule",
    }
    assert by_device["gpu-2"]["value"] == "health-gated_score-0.00"
    assert by_device["gpu-3"]["value"] == "stale_score-0.90"
    assert all(name.startswith("fairlane-n.gpu-") for name in rules)


def test_a_recovered_gpu_keeps_its_rule_through_the_window_then_loses_it() -> None:
    fleet = fleet_of(node("n", [0.3]))
    devices = devices_of([nvidia_slice("n", ["n-0"])])
    fleet.apply(gpu_score(node="n", uuid="n-0", index=0, score=0.9, ts_ms=NOW + 1000))
    cooling = desired_rules(fleet, POLICY, devices, NOW + 2000)
    assert {r["taint"]["value"] for r in cooling.values()} == {"cooling_score-0.90"}
    assert len(cooling) == 2  # the GPU and its MIG device
    fleet.apply(gpu_score(node="n", uuid="n-0", index=0, score=0.9, ts_ms=NOW + 121_000))
    assert desired_rules(fleet, POLICY, devices, NOW + 121_000) == {}


def test_the_plan_creates_updates_on_a_change_of_state_and_deletes() -> None:
    def spec(value: str, device: str = "gpu-0") -> dict[str, Any]:
        selector = {"driver": "gpu.nvidia.com", "pool": "n", "device": device}
        return {"deviceSelector": selector, "taint": {"key": TAINT_KEY, "value": value}}

    existing = {
        "a": spec("below-threshold_score-0.40"),
        "b": spec("cooling_score-0.7"),
        "c": spec("stale_score-0.9"),
    }
    desired = {
        "a": spec("below-threshold_score-0.30"),  # same state: left as is
        "b": spec("below-threshold_score-0.50"),  # fell again: rewritten
        "d": spec("stale_score-0.9", "gpu-3"),
    }
    changes = plan(desired, existing)
    assert list(changes.create) == ["d"]
    assert list(changes.update) == ["b"]
    assert changes.delete == ["c"]
