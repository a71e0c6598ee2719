"""Allocated ResourceClaims as placement events (pure)."""

from __future__ import annotations

from typing import Any

from fairlane_scheduler.core.device_taints import Device
from fairlane_scheduler.core.dra_claims import claim_assignments, claim_events

DRIVER = "gpu.nvidia.com"
DEVICES = [Device(DRIVER, "n", f"gpu-{i}", f"GPU-{i}", "n") for i in range(4)]


def claim(uid: str, devices: list[str], driver: str = DRIVER) -> dict[str, Any]:
    results = [{"driver": driver, "pool": "n", "device": d, "request": "r"} for d in devices]
    return {
        "metadata": {"uid": uid, "name": f"c-{uid}", "namespace": "team"},
        "status": {"allocation": {"devices": {"results": results}}} if devices else {},
    }


def test_allocated_claims_become_placements_and_go_when_released() -> None:
    claims = [claim("a", ["gpu-3", "gpu-1"]), claim("b", []), claim("c", ["x"], "other.io")]
    current = claim_assignments(claims, DEVICES, DRIVER)
    assert list(current) == ["a"]  # unallocated and foreign claims are not placements
    namespace, name, nodes = current["a"]
    assert (namespace, name) == ("team", "c-a")
    assert [(n.node, [g.uuid for g in n.gpus], n.cuda_visible_devices) for n in nodes] == [
        ("n", ["GPU-1", "GPU-3"], "1,3")
    ]
    created = claim_events({}, current, 5)
    assert [(e.placement_id, e.event, e.job_id) for e in created] == [("a", "created", "team/c-a")]
    assert claim_events(current, current, 6) == []  # nothing changed, nothing sent
    released = claim_events(current, {}, 7)
    assert [(e.placement_id, e.event) for e in released] == [("a", "released")]
