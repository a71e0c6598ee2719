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

import itertools
import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

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
    """What the extender keeps between calls: node id -> its fleet rows (a matrix padded
    with -1) and name -> node id, rebuilt only when GPUs or nodes appear (a GPU is
    assumed to stay on its node); and the rows Fairlane placements hold and the
    cordoned nodes, recomputed only when those sets change."""

    def __init__(self) -> None:
        self._key = (-1, -1)
        self.rows: npt.NDArray[np.intp] = np.full((0, 1), -1, dtype=np.intp)
        self.ids: dict[str, int] = {}
        self._allocated: tuple[Collection[str], int, npt.NDArray[np.bool_]] | None = None
        self._cordoned: tuple[Collection[str], int, npt.NDArray[np.bool_]] | None = None

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
            self.ids = {name: i for i, name in enumerate(fleet.nodes)}
        return self.rows

    def allocated(self, fleet: FleetView, uuids: Collection[str]) -> npt.NDArray[np.bool_]:
        """Rows that Fairlane placements hold."""
        n = len(fleet)
        held = self._allocated
        if held is None or held[1] != n or not (held[0] is uuids or held[0] == uuids):
            mask = np.zeros(n, dtype=bool)
            mask[fleet.rows_of(uuids)] = True
            self._allocated = held = (uuids, n, mask)
        return held[2]

    def cordoned(self, fleet: FleetView) -> npt.NDArray[np.bool_]:
        """Per node id: cordoned."""
        names, width = fleet.cordoned, len(fleet.nodes)
        held = self._cordoned
        if held is None or held[1] != width or held[0] is not names:
            mask = np.zeros(width, dtype=bool)
            mask[[i for name in names if (i := self.ids.get(name)) is not None]] = True
            self._cordoned = held = (names, width, mask)
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
    _passed: list[str] | None = field(default=None, repr=False, compare=False)

    def passed(self) -> list[str]:
        if self._passed is None:
            object.__setattr__(
                self, "_passed", list(itertools.compress(self.names, self.fits.tolist()))
            )
        return self._passed  # type: ignore[return-value]

    def failed(self) -> dict[str, str]:
        bad = ~self.fits & ~self.unresolvable
        return {self.names[i]: self.reasons[self.names[i]] for i in np.flatnonzero(bad)}

    def unresolvable_nodes(self) -> dict[str, str]:
        return {
            self.names[i]: self.reasons[self.names[i]] for i in np.flatnonzero(self.unresolvable)
        }

    def priorities(self, names: Sequence[str] | None = None) -> list[int]:
        """0..10 per node: its offered worst-GPU capacity against the best node's; for
        ``names`` (a subset, as prioritize sends after filter) when given."""
        cap = np.where(self.fits, self.min_capacity, 0.0)
        if names is not None and names == self.passed():  # the usual case: the survivors
            cap = cap[self.fits]
        elif names is not None:
            index = dict(zip(self.names, range(len(self.names)), strict=True))
            at = np.fromiter(map(index.get, names, itertools.repeat(-1)), np.intp)
            cap = np.where(at >= 0, cap[at], 0.0)
        best = float(cap.max(initial=0.0))
        if best <= 0:
            return [0] * len(cap)
        return np.rint(MAX_PRIORITY * cap / best).astype(int).tolist()  # type: ignore[no-any-return]


def _states(
    fleet: FleetView,
    slots: NodeSlots,
    policy: PlacementPolicy,
    *,
    allocated: Collection[str],
    rows: npt.NDArray[np.intp],
    node_ids: npt.NDArray[np.intp],
    now_ms: int,
) -> npt.NDArray[np.int8]:
    """The placement filter's first reason for each candidate row (FREE: none), computed
    on the candidates' rows only, never the whole fleet."""
    recovered = fleet.recovered_ms[rows]
    window_ms = fleet.stability.window_s * 1000
    cooling = (fleet.dropped_ms[rows] != NEVER) & (
        (recovered == NEVER) | (now_ms - recovered < window_ms)
    )
    state = np.where(cooling, np.int8(COOLING), np.int8(FREE))
    state = np.where(fleet.score[rows] < policy.threshold, np.int8(BELOW), state)
    if policy.stale == "exclude":
        too_old = fleet.ts_ms[rows] < now_ms - policy.stale_after_s * 1000
        state = np.where(fleet.stale[rows] | too_old, np.int8(STALE), state)
    if fleet.cordoned:
        cordoned = slots.cordoned(fleet)[node_ids][:, None]
        state = np.where(cordoned, np.int8(CORDONED), state)
    if allocated:
        state = np.where(slots.allocated(fleet, allocated)[rows], np.int8(ALLOCATED), state)
    return state  # each later mask overrides: the first reason in the filter's order wins


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
    explain: bool = True,
) -> Verdicts:
    """``held``: GPUs Kubernetes pods hold, per fleet node id (core/pod_ledger.py).
    ``explain``: write the reasons (prioritize needs none)."""
    want = shape.gpus_per_node
    matrix = slots.matrix(fleet)
    ids = np.fromiter(map(slots.ids.get, node_names, itertools.repeat(-1)), np.intp)
    known = ids >= 0
    node_ids = np.where(known, ids, 0)
    rows = matrix[node_ids]  # candidates x slots, -1 padding
    rows[~known] = -1
    present = rows >= 0
    safe = np.where(present, rows, 0)
    state = _states(
        fleet, slots, policy, allocated=allocated, rows=safe, node_ids=node_ids, now_ms=now_ms
    )
    static = _static_ok(fleet, shape, safe)
    if static is not None:
        state = np.where(static, state, STATIC)
    state = np.where(present, state, -1)
    qualifying = state == FREE
    taken = np.zeros(len(ids), dtype=np.int64)
    if held is not None:
        taken = np.where(known, held[node_ids], 0)
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
    bad = np.flatnonzero(~fits)
    if explain and len(bad):
        columns = (known, state, safe, taken)
        _explain(
            fleet,
            policy,
            now_ms=now_ms,
            want=want,
            bad=bad,
            columns=columns,
            names=node_names,
            reasons=reasons,
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


_LABELS = (
    (ALLOCATED, "placed by Fairlane"),
    (CORDONED, "cordoned"),
    (STALE, "stale"),
    (STATIC, "not of an allowed model and size"),
)


def _explain(
    fleet: FleetView,
    policy: PlacementPolicy,
    *,
    now_ms: int,
    want: int,
    bad: npt.NDArray[np.intp],
    columns: tuple[npt.NDArray[Any], ...],
    names: Sequence[str],
    reasons: dict[str, str],
) -> None:
    """Why each node in ``bad`` cannot take the pod, naming the state of its GPUs; the
    numbers are taken for all of them at once, and equal reasons are written once."""
    known, state, rows, taken = (c[bad] for c in columns)
    present = state >= 0
    usable = present & (state != STATIC)
    n_usable = usable.sum(axis=1)
    n_healthy = (usable & (fleet.score[rows] > 0)).sum(axis=1)
    counts = np.stack([(state == code).sum(axis=1) for code, _ in _LABELS], axis=1)
    below = state == BELOW
    best_below = np.where(below, fleet.score[rows], -np.inf).max(axis=1)
    cooling = state == COOLING
    back = np.where(cooling, fleet.recovered_ms[rows], NEVER).max(axis=1)
    free = (state == FREE).sum(axis=1) - taken
    window_ms = round(fleet.stability.window_s * 1000)
    keys = zip(
        known.tolist(),
        n_usable.tolist(),
        n_healthy.tolist(),
        map(tuple, counts.tolist()),
        below.sum(axis=1).tolist(),
        np.round(best_below, 2).tolist(),
        cooling.sum(axis=1).tolist(),
        (back // 1000).tolist(),
        taken.tolist(),
        free.tolist(),
        strict=True,
    )
    written: dict[tuple[Any, ...], str] = {}
    for i, key in zip(bad.tolist(), keys, strict=True):
        if (name := names[i]) in reasons:  # a gang's reason, already written
            continue
        if (text := written.get(key)) is None:
            text = written[key] = _reason(key, want, policy.threshold, window_ms)
        reasons[name] = text


def _reason(key: tuple[Any, ...], want: int, threshold: float, window_ms: int) -> str:
    known, usable, healthy, counts, below, best, cooling, back_s, taken, free = key
    if not known:
        return "no GPU scores from Fairlane for this node"
    if usable < want:
        return f"{usable} GPUs of an allowed model and size, need {want}"
    if healthy < want:
        return f"{healthy} healthy GPUs, need {want}"
    parts = [f"{c} {label}" for c, (_, label) in zip(counts, _LABELS, strict=True) if c]
    if below:
        parts.append(f"{below} score {best:.2f} < {threshold:.2f}")
    if cooling:
        parts.append(f"{cooling} cooling until {_utc(back_s * 1000 + window_ms)}")
    if taken:
        parts.append(f"{taken} held by Kubernetes pods")
    return f"{max(free, 0)} of {want} GPUs free to take ({', '.join(parts)})"


def _utc(ms: int) -> str:
    return time.strftime("%H:%M:%SZ", time.gmtime(ms / 1000))
