"""GPU health as DRA device taints (pure): which ``DeviceTaintRule`` objects
(resource.k8s.io/v1) should exist, from the fleet view and the devices that a GPU DRA
driver publishes in ResourceSlices, and what to change to get there.

One rule per GPU that Fairlane holds out — below the threshold, cooling (the
stabilization window after it came back), stale, or health-gated (score 0) — with
effect ``NoSchedule``: kube-scheduler's allocator then never picks that device, for
ResourceClaims and for classic ``nvidia.com/gpu`` limits backed by DRA alike. The rule
goes once the GPU qualifies again, i.e. after it recovered *and* stayed above the
threshold for the window. GPUs Fairlane does not know (no score) are left alone.

Devices are matched to GPUs by the ``uuid`` attribute, as NVIDIA's driver
(``gpu.nvidia.com``, NVIDIA/k8s-dra-driver-gpu) publishes it on each ``gpu-<minor>``
device; MIG devices carry their own uuid and a ``parentUUID``, which is matched too.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy, rejection_masks

__all__ = [
    "MANAGED_BY",
    "NVIDIA_DRIVER",
    "TAINT_KEY",
    "Device",
    "TaintChanges",
    "desired_rules",
    "devices_of",
    "plan",
]

NVIDIA_DRIVER = "gpu.nvidia.com"
TAINT_KEY = "fairlane.dev/gpu-health"
MANAGED_BY = {"app.kubernetes.io/managed-by": "fairlane"}
_HELD_OUT = ("stale", "score below threshold", "cooling")
_VALUE = {"stale": "stale", "score below threshold": "below-threshold", "cooling": "cooling"}


@dataclass(frozen=True)
class Device:
    driver: str
    pool: str
    name: str
    uuid: str
    node: str = ""  # the slice's nodeName (the pool's name when it has none)


def devices_of(slices: Iterable[Mapping[str, Any]], driver: str = NVIDIA_DRIVER) -> list[Device]:
    """The devices of ``driver``'s ResourceSlices that name a GPU uuid."""
    found = []
    for item in slices:
        spec = item.get("spec") or {}
        if spec.get("driver") != driver:
            continue
        pool = str((spec.get("pool") or {}).get("name", ""))
        node = str(spec.get("nodeName") or pool)
        for device in spec.get("devices") or []:
            attributes = device.get("attributes") or {}
            for key in ("parentUUID", "uuid"):  # a MIG device is held out with its GPU
                if uuid := (attributes.get(key) or {}).get("string"):
                    found.append(Device(driver, pool, str(device.get("name")), str(uuid), node))
                    break
    return found


def _rule_name(device: Device) -> str:
    """A DNS subdomain, unique per device, readable where it can be."""
    base = re.sub(r"[^a-z0-9.-]+", "-", f"{device.pool}.{device.name}".lower()).strip("-.")
    digest = hashlib.sha256(f"{device.driver}/{device.pool}/{device.name}".encode()).hexdigest()
    return f"fairlane-{base[:200]}-{digest[:10]}"


def desired_rules(
    fleet: FleetView,
    policy: PlacementPolicy,
    devices: Iterable[Device],
    now_ms: int,
) -> dict[str, dict[str, Any]]:
    """name -> DeviceTaintRule spec, for every device whose GPU Fairlane holds out."""
    n = len(fleet)
    masks = dict(rejection_masks(fleet, JobShape(1), policy, np.zeros(0, np.intp), now_ms))
    reason = np.full(n, "", dtype=object)
    for why in reversed(_HELD_OUT):  # the first in the filter's order wins
        reason[masks[why]] = why
    gated = fleet.score[:n] <= 0
    rules = {}
    for device in devices:
        row = fleet.row.get(device.uuid)
        if row is None or not reason[row]:
            continue
        kind = "health-gated" if gated[row] else _VALUE[str(reason[row])]
        value = f"{kind}_score-{fleet.score[row]:.2f}"  # a label value: [A-Za-z0-9._-]
        rules[_rule_name(device)] = {
            "deviceSelector": {"driver": device.driver, "pool": device.pool, "device": device.name},
            "taint": {"key": TAINT_KEY, "value": value, "effect": "NoSchedule"},
        }
    return rules


@dataclass(frozen=True)
class TaintChanges:
    create: dict[str, dict[str, Any]]
    update: dict[str, dict[str, Any]]  # name -> new spec (the taint's value changed)
    delete: list[str]


def plan(
    desired: Mapping[str, dict[str, Any]], existing: Mapping[str, dict[str, Any]]
) -> TaintChanges:
    """From the rules Fairlane made (name -> spec) to the desired ones. A changed score
    alone (same state) is not rewritten: the value's score is the one when it was held out."""

    def state(spec: Mapping[str, Any]) -> str:
        return str(spec.get("taint", {}).get("value", "")).split("_", 1)[0]

    create = {k: v for k, v in desired.items() if k not in existing}
    update = {
        k: v
        for k, v in desired.items()
        if k in existing
        and (
            state(existing[k]) != state(v)
            or existing[k].get("deviceSelector") != v["deviceSelector"]
        )
    }
    return TaintChanges(create, update, sorted(set(existing) - set(desired)))
