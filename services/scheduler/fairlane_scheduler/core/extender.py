"""kube-scheduler extender decisions (pure): which candidate nodes can take a pod's GPUs,
why the others cannot, and how the fitting ones rank.

kube-scheduler asks once per GPU pod, with up to thousands of node names, inside a 5 s
budget shared with everything else it does; so the work is a handful of vector
operations over the fleet's columns and a (nodes x GPUs) matrix of the candidates, no
per-call sort of the fleet and no Python loop over GPUs (docs/benchmarks.md, Extender).

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

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.fleet import NEVER, FleetView
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy

__all__ = ["MAX_PRIORITY", "GangAsk", "NodeSlots", "Verdicts", "judge_nodes"]

MAX_PRIORITY = 10  # k8s.io/kube-scheduler/extender/v1 MaxExtenderPriority
_GIB = 1024**3
# Row states, in the order the placement filter reports reasons (the first one wins).
FREE, ALLOCATED, CORDONED, STALE, BELOW, COOLING, STATIC = range(7)


@dataclass(frozen=True)
class GangAsk:
    name: str
    pods: int  # members still to place, this one included


class NodeSlots:
    """node id -> its fleet rows, as a matrix padded with -1; rebuilt only when GPUs or
    nodes appear (a GPU is assumed to stay on its node)."""

    def __init__(self) -> None:
        self._key = (-1, -1)
        self.rows: npt.NDArray[np.intp] = np.full((0, 1), -1, dtype=np.intp)
        self._allocated: tuple[Collection[str], int, npt.NDArray[np.bool_]] | None = None

    def matrix(self, fleet: FleetView) -> npt.NDArray[np.intp]:
        n = len(fleet)
        key = (n, len(fleet.nodes))
        if key != self._key:
            node = fleet.node[:n]
            counts = np.bincount(node, minlength=len(fleet.nodes))
            order = np.argsort(node, kind="stable")
            starts = np.r_[0, np.cumsum(counts)[:-1]]
            slot = np.arange(n) - np.repeat(starts, counts)
            rows = np.full((len(fleet.nodes), max(int(counts.max(initial=0)), 1)), -1, np.intp)
            rows[node[order], slot] = order
            self.rows, self._key = rows, key
        return self.rows

    def allocated(self, fleet: FleetView, uuids: Collection[str]) -> npt.NDArray[np.bool_]:
        """Rows that Fairlane placements hold, recomputed only when the set changes."""
        n = len(fleet)
        held = self._allocated
        if held is None or held[1] != n or not (held[0] is uuids or held[0] == uuids):
            mask = np.zeros(n, dtype=bool)
            mask[fleet.rows_of(uuids)] = True
            self._allocated = held = (uuids, n, mask)
        return held[2]


@dataclass(frozen=True)
class Verdicts:
    """One answer for every candidate, in columns (same order as ``names``)."""

    names: Sequence[str]
    fits: npt.NDArray[np.bool_]
    unresolvable: npt.NDArray[np.bool_]
    min_capacity: npt.NDArray[np.float64]
    node_ids: npt.NDArray[np.intp]  # fleet node id, -1 when unknown
    reasons: dict[str, str] = field(default_factory=dict)  # for every node that does not fit

    def passed(self) -> list[str]:
        return [n for n, ok in zip(self.names, self.fits.tolist(), strict=True) if ok]

    def failed(self) -> dict[str, str]:
        bad = ~self.fits & ~self.unresolvable
        return {self.names[i]: self.reasons[self.names[i]] for i in np.flatnonzero(bad)}

    def unresolvable_nodes(self) -> dict[str, str]:
        return {
            self.names[i]: self.reasons[self.names[i]] for i in np.flatnonzero(self.unresolvable)
        }

    def priorities(self) -> list[int]:
        """0..10 per node: its offered worst-GPU capacity against the best node's."""
        cap = np.where(self.fits, self.min_capacity, 0.0)
        best = float(cap.max(initial=0.0))
        if best <= 0:
            return [0] * len(self.names)
        return np.rint(MAX_PRIORITY * cap / best).astype(int).tolist()  # type: ignore[no-any-return]


def _row_states(
    fleet: FleetView, policy: PlacementPolicy, allocated: npt.NDArray[np.bool_], now_ms: int
) -> npt.NDArray[np.int8]:
    n = len(fleet)
    state = np.zeros(n, dtype=np.int8)
    masks = [
        (COOLING, fleet.cooling(now_ms)),
        (BELOW, fleet.score[:n] < policy.threshold),
    ]
    if policy.stale == "exclude":
        too_old = fleet.ts_ms[:n] < now_ms - policy.stale_after_s * 1000
        masks.append((STALE, fleet.stale[:n] | too_old))
    masks.append((CORDONED, fleet.cordoned_rows()))
    masks.append((ALLOCATED, allocated))
    for code, mask in masks:  # last written = first in the filter's order
        state[mask] = code
    return state


def _static_ok(
    fleet: FleetView, shape: JobShape, rows: npt.NDArray[np.intp]
) -> npt.NDArray[np.bool_] | None:
    """Which candidate GPUs have an allowed model and size (None: the pod asks neither)."""
    ok: npt.NDArray[np.bool_] | None = None
    if shape.models is not None:
        allowed = [i for i, key in enumerate(fleet.models) if key in shape.models]
        ok = np.isin(fleet.model[rows], allowed)
    if shape.min_gpu_memory_gib is not None:
        enough = fleet.mem_bytes[rows] >= shape.min_gpu_memory_gib * _GIB
        ok = enough if ok is None else ok & enough
    return ok


def judge_nodes(
    fleet: FleetView,
    slots: NodeSlots,
    *,
    shape: JobShape,
    policy: PlacementPolicy,
    allocated: Collection[str],
    held: npt.NDArray[np.int64] | None,
    now_ms: int,
    node_names: Sequence[str],
    gang: GangAsk | None = None,
) -> Verdicts:
    """``held``: GPUs Kubernetes pods hold, per fleet node id (core/pod_ledger.py)."""
    want = shape.gpus_per_node
    lookup = fleet.node_id
    ids = np.fromiter((-1 if (i := lookup(x)) is None else i for x in node_names), np.intp)
    known = ids >= 0
    matrix = slots.matrix(fleet)
    rows = matrix[np.where(known, ids, 0)]  # candidates x slots, -1 padding
    rows[~known] = -1
    present = rows >= 0
    safe = np.where(present, rows, 0)
    state = _row_states(fleet, policy, slots.allocated(fleet, allocated), now_ms)[safe]
    static = _static_ok(fleet, shape, safe)
    if static is not None:
        state = np.where(static, state, STATIC)
    state = np.where(present, state, -1)
    qualifying = state == FREE
    taken = np.zeros(len(ids), dtype=np.int64)
    if held is not None:
        taken = np.where(known, held[np.where(known, ids, 0)], 0)
    free = qualifying.sum(axis=1) - taken
    fits = known & (free >= want)
    capacity = np.sort(np.where(qualifying, fleet.capacity[safe], -np.inf), axis=1)[:, ::-1]
    pick = np.clip(taken + want - 1, 0, capacity.shape[1] - 1)  # worst case: pods took the best
    min_capacity = np.where(fits, capacity[np.arange(len(ids)), pick], 0.0)
    usable = present & (state != STATIC)
    healthy = (usable & (fleet.score[safe] > 0)).sum(axis=1)
    unresolvable = ~known | (usable.sum(axis=1) < want) | (healthy < want)
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
    for i in np.flatnonzero(~fits):
        if (name := node_names[i]) not in reasons:  # gang reasons already written
            reasons[name] = _reason(
                fleet,
                policy,
                now_ms=now_ms,
                want=want,
                known=bool(known[i]),
                states=state[i],
                rows=safe[i],
                taken=int(taken[i]),
            )
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


_LABELS = {
    ALLOCATED: "placed by Fairlane",
    CORDONED: "cordoned",
    STALE: "stale",
    STATIC: "not of an allowed model and size",
}


def _reason(
    fleet: FleetView,
    policy: PlacementPolicy,
    *,
    now_ms: int,
    want: int,
    known: bool,
    states: npt.NDArray[np.int8],
    rows: npt.NDArray[np.intp],
    taken: int,
) -> str:
    """Why one node cannot take the pod, naming the state of its GPUs."""
    if not known:
        return "no GPU scores from Fairlane for this node"
    usable = int(np.count_nonzero((states >= 0) & (states != STATIC)))
    if usable < want:
        return f"{usable} GPUs of an allowed model and size, need {want}"
    healthy = int(np.count_nonzero((states >= 0) & (states != STATIC) & (fleet.score[rows] > 0)))
    if healthy < want:
        return f"{healthy} healthy GPUs, need {want}"
    parts = [f"{int(np.count_nonzero(states == code))} {label}" for code, label in _LABELS.items()]
    below = states == BELOW
    if below.any():
        best = float(fleet.score[rows][below].max())
        parts.append(f"{int(below.sum())} score {best:.2f} < {policy.threshold:.2f}")
    cooling = states == COOLING
    if cooling.any():
        back = int(fleet.recovered_ms[rows][cooling].max())  # cooling: recovered is set
        until = back + round(fleet.stability.window_s * 1000)
        parts.append(f"{int(cooling.sum())} cooling until {_utc(until)}")
    if taken:
        parts.append(f"{taken} held by Kubernetes pods")
    free = int(np.count_nonzero(states == FREE)) - taken
    detail = ", ".join(p for p in parts if not p.startswith("0 "))
    return f"{max(free, 0)} of {want} GPUs free to take ({detail})"


def _utc(ms: int) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(ms / 1000))
