"""kube-scheduler extender decisions (pure): which candidate nodes can take a pod's GPUs,
why the others cannot, and how the fitting ones rank.

kube-scheduler asks once per GPU pod, with up to thousands of node names, inside a 5 s
budget shared with everything else it does; so a decision reads the per-node summaries
(core/node_summary.py: qualifying GPUs and their capacities, GPUs per state, kept
current as records come), a few numbers per candidate, explains a failed node from those
numbers too, and looks at single GPUs only of nodes whose GPUs differ in a model or size
the pod asks about (docs/benchmarks-history.md, Extender).

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
from fairlane_scheduler.core.node_states import FREE, HEALTHY, STATIC
from fairlane_scheduler.core.node_summary import (
    NodeSummaries,
    no_tally,
    row_states,
    state_tally,
)
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy
from fairlane_scheduler.core.verdicts import MAX_PRIORITY, Verdicts

__all__ = ["MAX_PRIORITY", "GangAsk", "Verdicts", "gpu_states", "judge_nodes"]

_GIB = 1024**3


@dataclass(frozen=True)
class GangAsk:
    name: str
    pods: int  # members still to place, this one included


def gpu_states(
    fleet: FleetView,
    summaries: NodeSummaries,
    policy: PlacementPolicy,
    shape: JobShape,
    node_ids: npt.NDArray[np.intp],
    *,
    now_ms: int,
    holds: bool = True,
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.intp]]:
    """The first reason of every GPU of these (known) nodes for this pod, STATIC for one
    of a model or size it does not accept (``holds`` False: placements' holds left out);
    and their fleet rows (-1 padding)."""
    rows = summaries.rows[node_ids]
    cordoned = summaries.cordoned[node_ids]
    state, _ = row_states(fleet, policy, rows, cordoned, now_ms, holds=holds)
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
    tally = summaries.tally.take(at, axis=0)  # take: a third of fancy indexing's time
    usable = summaries.size.take(at)  # of an allowed model and size
    mixed_capacity = None
    if shape.models is not None or shape.min_gpu_memory_gib is not None:
        none_ok, mixed = _static_nodes(fleet, summaries, shape, at)
        if len(n := np.flatnonzero(none_ok)):
            tally[n] = no_tally(len(n))
            tally[n, STATIC], usable[n] = usable[n], 0
        if len(m := np.flatnonzero(mixed)):
            state, rows = gpu_states(fleet, summaries, policy, shape, at[m], now_ms=now_ms)
            tally[m] = state_tally(fleet, state, rows)
            usable[m] = tally[m, :STATIC].sum(axis=1)
            safe = np.where(rows >= 0, rows, 0)
            free_cap = np.where(state == FREE, fleet.capacity[safe], -np.inf)
            mixed_capacity = (m, -np.sort(-free_cap, axis=1))
    taken = np.zeros(len(at), dtype=np.int64)
    if held is not None:
        taken[known] = held[at[known]]
    free = tally[:, FREE] - taken
    fits = known & (free >= want)
    # Worst case: the pods took the best; a node offers its next qualifying GPUs.
    pick = np.clip(taken + want - 1, 0, summaries.capacity.shape[1] - 1)
    offered = summaries.capacity[at, pick]
    if mixed_capacity is not None:
        m, capacity = mixed_capacity
        offered[m] = capacity[np.arange(len(m)), pick[m]]
    min_capacity = np.where(fits, offered, 0.0)
    unresolvable = ~known | (usable < want) | (tally[:, HEALTHY] < want)
    alone, why = fits, None
    if gang is not None:
        fits, why = _gang(fits, members=free // max(want, 1), min_capacity=min_capacity, gang=gang)
    unresolvable &= ~fits
    ids = np.where(known, at, -1)
    verdicts = Verdicts(node_names, fits, unresolvable, min_capacity, ids)
    if explain and len(bad := np.flatnonzero(~fits)):
        texts = explain_reasons(
            tally.take(bad, axis=0),
            known=known[bad],
            usable=usable[bad],
            taken=taken[bad],
            want=want,
            threshold=policy.threshold,
            window_ms=round(fleet.stability.window_s * 1000),
        )
        if why is not None:  # the gang's reason: why a node that fits is not chosen
            chosen_alone = alone[bad].tolist()
            texts = [why if fit else text for text, fit in zip(texts, chosen_alone, strict=True)]
        verdicts.explain(bad, texts)
    return verdicts


def _gang(
    fits: npt.NDArray[np.bool_],
    *,
    members: npt.NDArray[np.int64],
    min_capacity: npt.NDArray[np.float64],
    gang: GangAsk,
) -> tuple[npt.NDArray[np.bool_], str]:
    """Only the fastest nodes that together fit the rest of the gang; and the reason of
    those that fit alone but are not chosen."""
    members = np.where(fits, np.minimum(members, gang.pods), 0)
    if int(members.sum()) < gang.pods:
        why = (
            f"gang {gang.name}: {gang.pods} pod(s) still to place, these nodes fit {members.sum()}"
        )
        return np.zeros_like(fits), why
    order = np.lexsort((np.arange(len(fits)), -min_capacity))
    order = order[fits[order]]
    enough = int(np.searchsorted(np.cumsum(members[order]), gang.pods)) + 1
    chosen = np.zeros_like(fits)
    chosen[order[:enough]] = True
    return chosen, f"gang {gang.name}: faster nodes fit its remaining {gang.pods} pod(s)"
