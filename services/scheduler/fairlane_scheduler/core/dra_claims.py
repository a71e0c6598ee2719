"""Allocated DRA ResourceClaims as Fairlane placements (pure), so that the scorer masks
the load of the pods using those GPUs exactly as it does for the API's placements.

A claim allocated devices of the GPU driver becomes one placement (id: the claim's uid,
job: ``<namespace>/<claim>``) with the GPUs on each node; it is released when the claim
is gone or no longer allocated. Devices are mapped to GPUs through the ResourceSlices
(core/device_taints.py: the ``uuid`` attribute)."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from fairlane_events.records import GpuSlot, NodeAssignment, PlacementEvent
from fairlane_scheduler.core.device_taints import Device

__all__ = ["claim_assignments", "claim_events"]

_MASTER_PORT = 29500  # a claim is no launch: the field is required, the value unused
_MINOR = re.compile(r"^gpu-(\d+)$")


def claim_assignments(
    claims: Iterable[Mapping[str, Any]], devices: Iterable[Device], driver: str
) -> dict[str, tuple[str, str, tuple[NodeAssignment, ...]]]:
    """claim uid -> (namespace, name, its GPUs per node), for allocated claims only."""
    by_key = {(d.pool, d.name): d for d in devices if d.driver == driver}
    found = {}
    for claim in claims:
        metadata = claim.get("metadata") or {}
        allocation = (claim.get("status") or {}).get("allocation") or {}
        per_node: dict[str, list[GpuSlot]] = {}
        for result in (allocation.get("devices") or {}).get("results") or []:
            device = by_key.get((result.get("pool"), result.get("device")))
            if result.get("driver") != driver or device is None:
                continue
            minor = _MINOR.match(device.name)
            slot = GpuSlot(uuid=device.uuid, index=int(minor.group(1)) if minor else 0)
            per_node.setdefault(device.node, []).append(slot)
        if not per_node:
            continue
        world = sum(len(g) for g in per_node.values())
        master = min(per_node)
        nodes = tuple(
            NodeAssignment(
                node=node,
                node_rank=rank,
                gpus=sorted(gpus, key=lambda g: g.index),
                cuda_visible_devices=",".join(
                    str(g.index) for g in sorted(gpus, key=lambda g: g.index)
                ),
                master_addr=master,
                master_port=_MASTER_PORT,
                world_size=world,
            )
            for rank, (node, gpus) in enumerate(sorted(per_node.items()))
        )
        found[str(metadata.get("uid"))] = (
            str(metadata.get("namespace")),
            str(metadata.get("name")),
            nodes,
        )
    return found


def claim_events(
    published: Mapping[str, tuple[str, str, tuple[NodeAssignment, ...]]],
    current: Mapping[str, tuple[str, str, tuple[NodeAssignment, ...]]],
    now_ms: int,
) -> list[PlacementEvent]:
    """What to publish to go from the claims already published to the current ones."""

    def event(
        uid: str, held: tuple[str, str, tuple[NodeAssignment, ...]], kind: str
    ) -> PlacementEvent:
        namespace, name, nodes = held
        return PlacementEvent(
            schema_="placement/1",
            placement_id=uid,
            job_id=f"{namespace}/{name}",
            namespace=namespace,
            event=kind,
            ts_ms=now_ms,
            nodes=list(nodes),
            reason="DRA ResourceClaim" if kind == "created" else "claim deallocated",
        )

    changes = [
        event(uid, held, "created") for uid, held in current.items() if published.get(uid) != held
    ]
    changes += [
        event(uid, held, "released") for uid, held in published.items() if uid not in current
    ]
    return changes
