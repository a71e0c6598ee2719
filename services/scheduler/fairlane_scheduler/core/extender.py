"""kube-scheduler extender decisions (pure): which candidate nodes can take a pod's GPUs,
why the others cannot, and how the fitting ones rank.

kube-scheduler asks once per GPU pod, with up to thousands of node names, inside a 5 s
budget shared with everything else it does; so a decision reads the per-node summaries
(core/node_summary.py: qualifying GPUs and their capacities, kept current as records
come), a few numbers per candidate, and looks at single GPUs only of the nodes it must
explain or whose GPUs differ in a model or size the pod asks about (docs/benchmarks.md,
Extender).

A GPU *qualifies* for the pod as the placement filter says (core/placement.py): free,
not cordoned, fresh, of an allowed model and size, at or above the threshold, not
cooling. GPUs that Kubernetes pods hold on a node (core/pod_ledger.py) are counted
against its qualifying ones, and assumed to be its best (the capacity offered is the
worst case). A node that cannot fit the pod whatever happens to load or scores (unknown
to Fairlane, wrong model or size, too few healthy GPUs) is *unresolvable*: preemption
cannot help. One whose GPUs are merely held, stale, cooling or below the threshold has
*failed* for now, and the reason names that state.

Gangs: the pods of one gang are passed only to nodes that, together, fit every member
not yet placed, and of those only the fastest (highest worst-GPU capacity) that suffice
— the API's rule that a gang runs at its slowest GPU.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.extender_reasons import explain as explain_reasons
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_summary import FREE, STATIC, NodeSummaries, row_states
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy
from fairlane_scheduler.core.verdicts import MAX_PRIORITY, Verdicts

__all__ = ["MAX_PRIORITY", "GangAsk", "Verdicts", "judge_nodes"]

_GIB = 1024**3


@dataclass(frozen=True)
class GangAsk:
    name: str
    pods: int  # members still to place, this one included


def _gpu_states(
    fleet: FleetView,
    summaries: NodeSummaries,
    policy: PlacementPolicy,
    shape: JobShape,
    node_ids: npt.NDArray[np.intp],
    *,
    now_ms: int,
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.intp]]:
    """The first reason of every GPU of these (known) nodes for this pod, STATIC for one
    of a model or size it does not accept; and their fleet rows (-1 padding)."""
    rows = summaries.rows[node_ids]
    state, _ = row_states(fleet, policy, rows, summaries.cordoned[node_ids], now_ms)
    safe = np.where(rows >= 0, rows, 0)
    ok = np.ones(rows.shape, dtype=bool)
    if shape.models is not None:
        allowed = [i for i, key in enumerate(fleet.models) if key in shape.models]
        ok &= np.isin(fleet.model[safe], allowed)
    if shape.min_gpu_memory_gib is not None:
        ok &= fleet.mem_bytes[safe] >= shape.min_gpu_memory_gib * _GIB
    return np.where((rows >= 0) & ~ok, np.int8(STATIC), state), rows


def _static_nodes(
    fleet: FleetView, summaries: NodeSummaries, shape: JobShape, at: npt.NDArray[np.intp]
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
    """Per candidate: none of its GPUs has an allowed model and size; and it is mixed
    (some have), to be judged GPU by GPU."""
    model, lo, hi = summaries.model[at], summaries.mem_lo[at], summaries.mem_hi[at]
    all_ok = np.ones(len(at), dtype=bool)
    none_ok = np.zeros(len(at), dtype=bool)
    if shape.models is not None:
        allowed = np.isin(model, [i for i, key in enumerate(fleet.models) if key in shape.models])
        all_ok &= allowed
        none_ok |= (model >= 0) & ~allowed
    if shape.min_gpu_memory_gib is not None:
        need = shape.min_gpu_memory_gib * _GIB
        all_ok &= lo >= need
        none_ok |= hi < need
    return none_ok, ~all_ok & ~none_ok


def judge_nodes(
    fleet: FleetView,
    summaries: NodeSummaries,
    *,
    shape: JobShape,
    policy: PlacementPolicy,
    held: npt.NDArray[np.int64] | None,
    now_ms: int,
    node_names: Sequence[str],
    gang: GangAsk | None = None,
    explain: bool = True,
) -> Verdicts:
    """``held``: GPUs Kubernetes pods hold, per fleet node id (core/pod_ledger.py).
    GPUs that Fairlane placements hold are the fleet's (``FleetView.held``).
    ``explain``: write the reasons (prioritize needs none)."""
    summaries.refresh(fleet, policy, now_ms)
    want = shape.gpus_per_node
    at = summaries.node_ids(node_names)
    known = at != summaries.unknown
    qualifying = summaries.counts[at, FREE]
    usable = summaries.size[at]
    healthy = summaries.healthy[at]
    capacity = summaries.capacity[at]
    if shape.models is not None or shape.min_gpu_memory_gib is not None:
        none_ok, mixed = _static_nodes(fleet, summaries, shape, at)
        qualifying[none_ok] = usable[none_ok] = healthy[none_ok] = 0
        if len(m := np.flatnonzero(mixed)):
            state, rows = _gpu_states(fleet, summaries, policy, shape, at[m], now_ms=now_ms)
            ok = state == FREE
            qualifying[m] = ok.sum(axis=1)
            good = (state >= 0) & (state != STATIC)
            usable[m] = good.sum(axis=1)
            healthy[m] = (good & (fleet.score[np.where(rows >= 0, rows, 0)] > 0)).sum(axis=1)
            free_cap = np.where(ok, fleet.capacity[np.where(rows >= 0, rows, 0)], -np.inf)
            capacity[m] = -np.sort(-free_cap, axis=1)
    taken = np.zeros(len(at), dtype=np.int64)
    if held is not None:
        taken[known] = held[at[known]]
    free = qualifying - taken
    fits = known & (free >= want)
    pick = np.clip(taken + want - 1, 0, capacity.shape[1] - 1)  # worst case: pods took the best
    min_capacity = np.where(fits, capacity[np.arange(len(at)), pick], 0.0)
    unresolvable = ~known | (usable < want) | (healthy < want)
    reasons: dict[str, str] = {}
    if gang is not None:
        fits = _gang(
            fits,
            members=free // max(want, 1),
            min_capacity=min_capacity,
            gang=gang,
            reasons=reasons,
            names=node_names,
        )
    unresolvable &= ~fits
    if explain and len(bad := np.flatnonzero(~fits)):
        state, rows = _gpu_states(fleet, summaries, policy, shape, at[bad], now_ms=now_ms)
        explain_reasons(
            fleet,
            policy.threshold,
            want=want,
            names=[node_names[i] for i in bad.tolist()],
            known=known[bad],
            state=state,
            rows=rows,
            taken=taken[bad],
            reasons=reasons,
        )
    ids = np.where(known, at, -1)
    return Verdicts(node_names, fits, unresolvable, min_capacity, ids, reasons)


def _gang(
    fits: npt.NDArray[np.bool_],
    *,
    members: npt.NDArray[np.int64],
    min_capacity: npt.NDArray[np.float64],
    gang: GangAsk,
    reasons: dict[str, str],
    names: Sequence[str],
) -> npt.NDArray[np.bool_]:
    """Only the fastest nodes that together fit the rest of the gang."""
    members = np.where(fits, np.minimum(members, gang.pods), 0)
    if int(members.sum()) < gang.pods:
        why = (
            f"gang {gang.name}: {gang.pods} pod(s) still to place, these nodes fit {members.sum()}"
        )
        reasons.update({names[i]: why for i in np.flatnonzero(fits)})
        return np.zeros_like(fits)
    order = np.lexsort((np.arange(len(fits)), -min_capacity))
    order = order[fits[order]]
    enough = int(np.searchsorted(np.cumsum(members[order]), gang.pods)) + 1
    chosen = np.zeros_like(fits)
    chosen[order[:enough]] = True
    why = f"gang {gang.name}: faster nodes fit its remaining {gang.pods} pod(s)"
    reasons.update({names[i]: why for i in np.flatnonzero(fits & ~chosen)})
    return chosen
