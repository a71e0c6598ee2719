"""What the scheduler knows about each node and GPU, for people (pure): the score and
its components, and the state the placement filter would give each GPU."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection
from dataclasses import dataclass

import numpy as np

from fairlane_scheduler.core.fleet import NEVER, FleetView
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy, rejection_masks

__all__ = ["GpuState", "NodeSummary", "gpu_states", "node_summaries"]


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


def gpu_states(
    fleet: FleetView, node: str, allocated: Collection[str], policy: PlacementPolicy, now_ms: int
) -> list[GpuState] | None:
    node_id = fleet.node_id(node)
    if node_id is None:
        return None
    states = _states(fleet, allocated, policy, now_ms)
    window_ms = round(fleet.stability.window_s * 1000)
    result = []
    for r in np.flatnonzero(fleet.node[: len(fleet)] == node_id):
        record = fleet.records[fleet.uuids[r]]
        recovered = int(fleet.recovered_ms[r])
        readmit = recovered + window_ms if states[r] == "cooling" and recovered != NEVER else None
        result.append(
            GpuState(
                uuid=record.uuid,
                index=record.index,
                model=record.model,
                score=record.score,
                effective_capacity=record.effective_capacity,
                components=dict(record.components),
                ts_ms=record.ts_ms,
                state=states[r],
                readmit_at_ms=readmit,
            )
        )
    return sorted(result, key=lambda g: g.index)


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
