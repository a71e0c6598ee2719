"""kube-scheduler extender decisions (pure): which candidate nodes can take a pod's GPUs,
why the others cannot, and how the fitting ones rank.

A node that cannot fit the pod whatever happens to its load or scores (unknown to
Fairlane, wrong GPU model, too little memory, too few GPUs, unhealthy GPUs) is
*unresolvable*: preemption cannot help. One whose GPUs are merely busy, stale, cooling or
scoring below the threshold has *failed* for now.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import (
    JobShape,
    PlacementPolicy,
    best_per_node,
    qualifying,
    rejection_masks,
)

__all__ = ["MAX_PRIORITY", "NodeVerdict", "judge_nodes", "priorities"]

MAX_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
_STATIC = ("model not allowed", "too little memory")  # what load and time cannot change


@dataclass(frozen=True)
class NodeVerdict:
    fits: bool
    unresolvable: bool = False
    reason: str = ""
    min_capacity: float = 0.0  # of the best GPUs for the pod, when it fits


def judge_nodes(
    fleet: FleetView,
    *,
    shape: JobShape,
    policy: PlacementPolicy,
    allocated: Collection[str],
    now_ms: int,
    node_names: Iterable[str],
) -> dict[str, NodeVerdict]:
    n, want = len(fleet), shape.gpus_per_node
    masks = rejection_masks(fleet, shape, policy, fleet.rows_of(allocated), now_ms)
    ok, _ = qualifying(masks, n)
    width = len(fleet.nodes)

    def per_node(mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.intp]:
        return np.bincount(fleet.node[:n][mask], minlength=width)

    fitting_static = np.ones(n, dtype=bool)
    for reason, mask in masks:
        if reason in _STATIC:
            fitting_static &= ~mask
    static_count = per_node(fitting_static)
    healthy_count = per_node(fitting_static & (fleet.score[:n] > 0))
    why = {r: per_node(m) for r, m in masks if r not in _STATIC}  # per node, per reason
    node_ids, top, _ = best_per_node(fleet, ok, want)
    capacity = dict(zip(node_ids.tolist(), fleet.capacity[top].min(axis=1).tolist(), strict=True))
    verdicts = {}
    for name in node_names:
        node_id = fleet.node_id(name)
        if node_id is None:
            verdicts[name] = NodeVerdict(False, True, "no GPU scores from Fairlane for this node")
        elif node_id in capacity:
            verdicts[name] = NodeVerdict(True, min_capacity=capacity[node_id])
        elif static_count[node_id] < want:
            verdicts[name] = NodeVerdict(
                False,
                True,
                f"{static_count[node_id]} GPUs of an allowed model and size, need {want}",
            )
        elif healthy_count[node_id] < want:
            verdicts[name] = NodeVerdict(
                False, True, f"{healthy_count[node_id]} healthy GPUs, need {want}"
            )
        else:
            detail = ", ".join(f"{c[node_id]} {r}" for r, c in why.items() if c[node_id])
            verdicts[name] = NodeVerdict(
                False, False, f"fewer than {want} qualifying GPUs ({detail})"
            )
    return verdicts


def priorities(verdicts: dict[str, NodeVerdict]) -> dict[str, int]:
    """0..10 per node: its best GPUs' minimum effective capacity against the best node's."""
    best = max((v.min_capacity for v in verdicts.values() if v.fits), default=0.0)
    return {
        name: round(MAX_PRIORITY * v.min_capacity / best) if v.fits and best > 0 else 0
        for name, v in verdicts.items()
    }
