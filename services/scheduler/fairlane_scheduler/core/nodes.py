"""What the scheduler knows about each node and GPU, for people (pure): the score and
its components, and the state the placement filter would give each GPU."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from fairlane_scheduler.core.fleet import NEVER, FleetView
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy, rejection_masks

__all__ = ["GpuState", "NodeSummary", "fleet_gpu_states", "gpu_states", "node_summaries"]


@dataclass(frozen=True)
class GpuState:
    uuid: str
    index: int
    model: str
    score: float
    effective_capacity: float
    components: dict[str, float | None]
    ts_ms: int
    state: str  # "free" or the first reason the filter would reject it for
    readmit_at_ms: int | None  # when a cooling GPU comes back, if it stays above


@dataclass(frozen=True)
class NodeSummary:
    node: str
    gpus: int
    free: int
    mean_score: float
    states: dict[str, int]


def _states(
    fleet: FleetView, allocated: Collection[str], policy: PlacementPolicy, now_ms: int
) -> list[str]:
    masks = rejection_masks(fleet, JobShape(1), policy, fleet.rows_of(allocated), now_ms)
    state = np.full(len(fleet), "free", dtype=object)
    for reason, mask in reversed(masks):  # the first reason in filter order wins
        state[mask] = reason
    return [str(s) for s in state]


def _gpu_state(fleet: FleetView, row: int, state: str) -> GpuState:
    record = fleet.records[fleet.uuids[row]]
    recovered = int(fleet.recovered_ms[row])
    window_ms = round(fleet.stability.window_s * 1000)
    readmit = recovered + window_ms if state == "cooling" and recovered != NEVER else None
    return GpuState(
        uuid=record.uuid,
        index=record.index,
        model=record.model,
        score=record.score,
        effective_capacity=record.effective_capacity,
        components=dict(record.components),
        ts_ms=record.ts_ms,
        state=state,
        readmit_at_ms=readmit,
    )


def gpu_states(
    fleet: FleetView, node: str, allocated: Collection[str], policy: PlacementPolicy, now_ms: int
) -> list[GpuState] | None:
    node_id = fleet.node_id(node)
    if node_id is None:
        return None
    states = _states(fleet, allocated, policy, now_ms)
    rows = np.flatnonzero(fleet.node[: len(fleet)] == node_id)
    return sorted((_gpu_state(fleet, int(r), states[r]) for r in rows), key=lambda g: g.index)


def fleet_gpu_states(
    fleet: FleetView, allocated: Collection[str], policy: PlacementPolicy, now_ms: int
) -> dict[str, list[GpuState]]:
    """Every node's GPUs (by index), as :func:`gpu_states` gives one node's, with the
    filter run once for the whole fleet rather than once per node."""
    states = _states(fleet, allocated, policy, now_ms)
    per_node: dict[str, list[GpuState]] = {}
    for r, state in enumerate(states):
        per_node.setdefault(fleet.nodes[int(fleet.node[r])], []).append(_gpu_state(fleet, r, state))
    return {node: sorted(gpus, key=lambda g: g.index) for node, gpus in sorted(per_node.items())}


def node_summaries(
    fleet: FleetView, allocated: Collection[str], policy: PlacementPolicy, now_ms: int
) -> list[NodeSummary]:
    states = _states(fleet, allocated, policy, now_ms)
    per_node: dict[int, Counter[str]] = {}
    for r, state in enumerate(states):
        per_node.setdefault(int(fleet.node[r]), Counter())[state] += 1
    n = len(fleet)
    sums = np.bincount(fleet.node[:n], weights=fleet.score[:n], minlength=len(fleet.nodes))
    return sorted(
        (
            NodeSummary(
                node=fleet.nodes[node_id],
                gpus=sum(counts.values()),
                free=counts["free"],
                mean_score=float(sums[node_id]) / sum(counts.values()),
                states=dict(counts),
            )
            for node_id, counts in per_node.items()
        ),
        key=lambda s: s.node,
    )
