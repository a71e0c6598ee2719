"""Per-node summaries of the fleet for one placement policy (pure), kept current from the
fleet's per-node change counter.

A decision over thousands of candidate nodes reads a few numbers per node — how many of
its GPUs qualify, their capacities best first, how many sit in each rejected state —
instead of judging every GPU of every candidate on every call. :meth:`NodeSummaries.refresh`
brings them up to date first, recomputing only the nodes whose GPUs took a score record
or changed hold since it last looked (``FleetView.node_changed``), whose cordon changed,
or whose state the clock alone changes by now (a cooling window ends, a record turns
stale: each node's ``due`` time). With 500 records between two calls that is at most 500
nodes, not the 12,500 of a 100k-GPU fleet.

Row states follow the placement filter's order of reasons, the first one wins: held by a
placement, cordoned, stale, below the threshold, cooling (core/placement.py). STATIC (not
of an allowed model or size) depends on the pod, so summaries never hold it; they keep
each node's model (-1: mixed) and memory range instead, and a pod that asks for a model or
size is judged GPU by GPU only on the nodes whose GPUs differ (core/extender.py).

Each node's *tally* (:func:`state_tally`) holds what a decision and its explanation read
of it: GPUs per state, healthy ones, the best score below the threshold and the latest
recovery of a cooling GPU. A failed node is then explained from its tally, without
looking at its GPUs again (core/extender_reasons.py).
"""

from __future__ import annotations

import itertools
from collections import deque
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core import few_nodes
from fairlane_scheduler.core import node_states as states
from fairlane_scheduler.core.fleet import NEVER, FleetView
from fairlane_scheduler.core.node_states import NOT_DUE as _NOT_DUE
from fairlane_scheduler.core.placement import PlacementPolicy

__all__ = [
    "NodeSummaries",
    "no_tally",
    "row_states",
    "state_tally",
]

#: Refreshes whose recomputed nodes are remembered, for followers (core/node_ranking.py).
RECENT_REFRESHES = 64
#: A refresh that recomputed more nodes than this is remembered as "many": a follower
#: then reads every node's stamp (:attr:`NodeSummaries.computed`) instead.
RECENT_NODES = 1024
#: Up to this many nodes are recomputed in plain Python (core/few_nodes.py), more with
#: numpy: the crossover of the two on 8-GPU nodes (~100 us either way).
FEW_NODES = 4
#: Up to this many nodes whose GPUs only changed hold are updated in place, more with
#: numpy (:meth:`NodeSummaries._update_holds`); up to this many changed nodes are also
#: found and stamped in plain Python (:meth:`NodeSummaries._refresh_few`).
HELD_NODES = 32
_EMPTY_TALLY = np.zeros(states.TALLY_WIDTH, dtype=np.int64)
_EMPTY_TALLY[[states.BEST_BELOW, states.BACK_S]] = (-100, NEVER // 1000)


def row_states(
    fleet: FleetView,
    policy: PlacementPolicy,
    rows: npt.NDArray[np.intp],
    cordoned: npt.NDArray[np.bool_],
    now_ms: int,
    *,
    holds: bool = True,
) -> tuple[npt.NDArray[np.int8], npt.NDArray[np.int64]]:
    """For a (nodes x slots) matrix of fleet rows (-1 padding) and each node's cordon:
    every row's first reason (FREE: none; -1: padding; ``holds`` False: the first but
    its hold), and per node the first time after ``now_ms`` when a state may change by
    the clock alone."""
    present = rows >= 0
    safe = np.where(present, rows, 0)
    recovered = fleet.recovered_ms[safe]
    window_ms = fleet.stability.window_s * 1000
    dropped = fleet.dropped_ms[safe] != NEVER
    cooling = dropped & ((recovered == NEVER) | (now_ms - recovered < window_ms))
    state = np.where(cooling, np.int8(states.COOLING), np.int8(states.FREE))
    state = np.where(fleet.score[safe] < policy.threshold, np.int8(states.BELOW), state)
    ends = np.where(dropped & (recovered != NEVER), np.ceil(recovered + window_ms), _NOT_DUE)
    ends = np.where(ends > now_ms, ends, _NOT_DUE)  # only what is still to come
    if policy.stale == "exclude":
        after_ms = policy.stale_after_s * 1000
        too_old = fleet.ts_ms[safe] < now_ms - after_ms
        state = np.where(fleet.stale[safe] | too_old, np.int8(states.STALE), state)
        turns = np.floor(fleet.ts_ms[safe] + after_ms) + 1  # stale once now_ms > ts + after
        ends = np.minimum(ends, np.where(turns > now_ms, turns, _NOT_DUE))
    state = np.where(cordoned[:, None], np.int8(states.CORDONED), state)
    ends = np.where(present, ends, _NOT_DUE)
    due = ends.min(axis=1, initial=_NOT_DUE).astype(np.int64)
    state = np.where(present, state, np.int8(-1))
    return (with_holds(fleet, state, rows) if holds else state), due


def with_holds(
    fleet: FleetView, unheld: npt.NDArray[np.int8], rows: npt.NDArray[np.intp]
) -> npt.NDArray[np.int8]:
    """The states of :func:`row_states` without the holds, the held rows ALLOCATED."""
    held = fleet.held[np.where(rows >= 0, rows, 0)] & (unheld >= 0)
    return np.where(held, np.int8(states.ALLOCATED), unheld)


def state_tally(
    fleet: FleetView, state: npt.NDArray[np.int8], rows: npt.NDArray[np.intp]
) -> npt.NDArray[np.int64]:
    """Per node of a (nodes x slots) state matrix (-1 padding) and its fleet rows: the
    tally columns (GPUs in each state, HEALTHY, BEST_BELOW, BACK_S)."""
    nodes, safe = len(state), np.where(rows >= 0, rows, 0)
    tally = np.empty((nodes, states.TALLY_WIDTH), dtype=np.int64)
    # One count per (node, state) pair, padding (-1) in a bin of its own: a bincount,
    # 13 times faster than comparing with each state and summing along the rows.
    pairs = (np.arange(nodes)[:, None] * (states.STATIC + 2) + (state + 1)).ravel()
    per_state = np.bincount(pairs, minlength=nodes * (states.STATIC + 2)).reshape(
        nodes, states.STATIC + 2
    )
    tally[:, : states.STATIC + 1] = per_state[:, 1:]
    score = fleet.score[safe]
    healthy = (state >= 0) & (state != states.STATIC) & (score > 0)
    tally[:, states.HEALTHY] = np.bincount(np.nonzero(healthy)[0], minlength=nodes)
    best = np.where(state == states.BELOW, score, -1.0).max(axis=1, initial=-1.0)
    tally[:, states.BEST_BELOW] = np.rint(best * 100)  # the score as a reason writes it
    back = np.where(state == states.COOLING, fleet.recovered_ms[safe], NEVER).max(
        axis=1, initial=NEVER
    )
    tally[:, states.BACK_S] = back // 1000
    return tally


def no_tally(nodes: int) -> npt.NDArray[np.int64]:
    """The tally of nodes without GPUs."""
    return np.tile(_EMPTY_TALLY, (nodes, 1))


class NodeSummaries:
    """Per fleet node id: its rows (a matrix padded with -1, rebuilt only when GPUs
    appear or move), and for the policy of the last :meth:`refresh` its tally (GPUs in
    each state...: :func:`state_tally`), its qualifying GPUs' capacities best first (-inf
    padding), the same GPUs' rows best score first (then GPU index; -1 padding: the
    placement's order within a node, core/placement_summary.py; slot x node, as a decision
    reads its first slots of many nodes), its size, model and memory range. One more row
    at the end, id :attr:`unknown`, is a node without GPUs: the one names Fairlane has no
    scores for get.

    What a refresh recomputed is stamped (:attr:`computed`, per node: the
    :attr:`refreshes` count then; :attr:`relayouts` counts new layouts, which renumber
    nodes), so a follower of the summaries (core/node_ranking.py) revisits those nodes
    only."""

    def __init__(self, few_nodes: int = FEW_NODES) -> None:
        self._few_nodes = few_nodes  # recomputed in plain Python up to this many at once
        self.refreshes = 0  # refreshes that recomputed some node
        self.relayouts = 0
        self._layout = -1
        self._policy: PlacementPolicy | None = None
        self._cordoned: frozenset[str] | None = None
        self._now_ms = -1
        self._changes = -1  # fleet.changes at the last refresh
        #: The nodes each of the last refreshes recomputed (sorted), the latest last;
        #: None for more than RECENT_NODES.
        self._recent: deque[list[int] | None] = deque(maxlen=RECENT_REFRESHES)
        self.rows: npt.NDArray[np.intp] = np.full((0, 1), -1, dtype=np.intp)
        self.ids: dict[str, int] = {}
        #: Per fleet row, as of its node's last recomputation: its state but its hold
        #: (-1: not computed yet), and whether it was held.
        self._unheld = np.full(0, -1, dtype=np.int8)
        self._held = np.zeros(0, dtype=bool)
        self._empty(0)

    def _empty(self, nodes: int) -> None:
        slots, width = self.rows.shape[1], nodes + 1
        self.unknown = nodes
        self._seen = np.full(width, -1, dtype=np.int64)  # node_changed when computed
        self.computed = np.zeros(width, dtype=np.int64)  # refreshes when computed
        #: When the clock alone may change a node's state next (ms).
        self.due = np.zeros(width, dtype=np.int64)
        self._next_due = 0  # at or before the earliest of them
        self.cordoned = np.zeros(width, dtype=bool)
        self.tally = no_tally(width)
        self.capacity = np.full((width, slots), -np.inf)
        self.ranked = np.full((slots, width), -1, dtype=np.intp)
        self.size = np.zeros(width, dtype=np.int64)
        self.model = np.full(width, -1, dtype=np.int64)
        self.mem_lo = np.zeros(width, dtype=np.int64)
        self.mem_hi = np.zeros(width, dtype=np.int64)

    def computed_since(self, refreshes: int) -> list[int] | None:
        """The nodes recomputed after refresh ``refreshes`` (of this layout), sorted,
        without a pass over :attr:`computed` (not to be modified); None when that is too
        many refreshes ago or too many nodes. A plain list: its followers take a few
        nodes at a time, and numpy's calls on arrays of a few cost more than the work."""
        behind = self.refreshes - refreshes
        if behind == 0:
            return []
        if not 0 < behind <= len(self._recent):
            return None
        recent = list(itertools.islice(reversed(self._recent), behind))
        if any(nodes is None for nodes in recent):
            return None
        if behind == 1:
            return recent[0]
        return sorted(set().union(*recent))  # type: ignore[arg-type]  # no None left

    def node_ids(self, names: Sequence[str]) -> npt.NDArray[np.intp]:
        """Fleet node id of each name, :attr:`unknown` for one Fairlane has no scores for."""
        ids = map(self.ids.get, names, itertools.repeat(self.unknown))
        return np.fromiter(ids, np.intp, len(names))

    def refresh(self, fleet: FleetView, policy: PlacementPolicy, now_ms: int) -> None:
        width = len(fleet.nodes)
        # A clock that went back could make a GPU judged stale fresh again, unseen.
        everything = fleet.layout != self._layout or policy != self._policy
        everything |= now_ms < self._now_ms
        self._now_ms = now_ms
        if everything:
            self._relayout(fleet)
            self._policy = policy
        touched = fleet.touched_since(self._changes)
        self._changes = fleet.changes
        if fleet.cordoned is not self._cordoned:
            cordoned = np.zeros(width + 1, dtype=bool)
            cordoned[[i for n in fleet.cordoned if (i := self.ids.get(n)) is not None]] = True
            self._seen[cordoned != self.cordoned] = -1
            self.cordoned, self._cordoned = cordoned, fleet.cordoned
            touched = None  # those nodes too: read every stamp
        due = now_ms >= self._next_due  # some node's state may have changed by the clock
        dirty: list[int] | npt.NDArray[np.intp]
        if everything:
            dirty = np.arange(width)
        elif touched is None:
            stamp = fleet.node_changed[:width]
            dirty = np.flatnonzero((stamp > self._seen[:width]) | (self.due[:width] <= now_ms))
        else:  # the nodes changed since the last refresh, and those now due
            late = np.flatnonzero(self.due[:width] <= now_ms).tolist() if due else []
            dirty = sorted({*touched, *late})
        if isinstance(dirty, list) and len(dirty) <= HELD_NODES:
            self._refresh_few(fleet, policy, dirty, now_ms)  # the usual case between decisions
            lowest = min(map(self.due.item, dirty), default=_NOT_DUE)
        elif len(dirty) > 0:
            dirty = np.asarray(dirty, dtype=np.intp)
            self._refresh_many(fleet, policy, dirty, now_ms, in_place=not everything)
            lowest = int(self.due[dirty].min())
        else:
            lowest = _NOT_DUE
        if everything or due or touched is None:
            self._next_due = int(self.due[:width].min(initial=_NOT_DUE))
        else:  # a lower bound: a node's due time may only have moved later
            self._next_due = min(self._next_due, lowest)

    def _refresh_many(
        self,
        fleet: FleetView,
        policy: PlacementPolicy,
        dirty: npt.NDArray[np.intp],
        now_ms: int,
        *,
        in_place: bool,
    ) -> None:
        """Recompute the nodes ``dirty`` (some), those whose GPUs only changed hold
        updated in place if few and ``in_place``."""
        self.refreshes += 1
        self.computed[dirty] = self.refreshes
        self._recent.append(dirty.tolist() if len(dirty) <= RECENT_NODES else None)
        # Nodes whose GPUs took no record since they were computed, nor the clock
        # changed a state of (a cordon change unset their stamp): holds alone.
        holds = fleet.node_scored[dirty] <= self._seen[dirty]
        holds &= self.due[dirty] > now_ms
        self._seen[dirty] = fleet.node_changed[dirty]
        recompute = dirty
        if in_place and 0 < np.count_nonzero(holds) <= HELD_NODES:
            left = self._update_holds(fleet, dirty[holds].tolist())
            recompute = np.concatenate([dirty[~holds], np.array(left, dtype=np.intp)])
        if len(recompute):
            self._compute(fleet, policy, recompute, now_ms)

    def _refresh_few(
        self, fleet: FleetView, policy: PlacementPolicy, dirty: list[int], now_ms: int
    ) -> None:
        """:meth:`_refresh_many` for a few nodes (sorted; not after a new layout or
        policy), a node at a time: numpy's ~15 calls on arrays of a few nodes cost more
        than this loop."""
        if not dirty:
            return
        self.refreshes += 1
        self._recent.append(dirty)
        scored, stamp, seen, due = fleet.node_scored, fleet.node_changed, self._seen, self.due
        holds, recompute = [], []
        for node in dirty:
            self.computed[node] = self.refreshes
            if scored.item(node) <= seen.item(node) and due.item(node) > now_ms:
                holds.append(node)
            else:
                recompute.append(node)
            seen[node] = stamp.item(node)
        if holds:
            recompute += self._update_holds(fleet, holds)
        if recompute:
            self._compute(fleet, policy, np.array(recompute, dtype=np.intp), now_ms)

    def _relayout(self, fleet: FleetView) -> None:
        n, width = len(fleet), len(fleet.nodes)
        node = fleet.node[:n]
        counts = np.bincount(node, minlength=width)
        order = np.argsort(node, kind="stable")
        starts = np.cumsum(counts) - counts  # empty for an empty fleet
        slot = np.arange(n) - np.repeat(starts, counts)
        slots = max(int(counts.max(initial=0)), 1)
        self.rows = np.full((width + 1, slots), -1, dtype=np.intp)
        self.rows[node[order], slot] = order
        self.ids = {name: i for i, name in enumerate(fleet.nodes)}
        self._unheld = np.full(n, -1, dtype=np.int8)
        self._held = np.zeros(n, dtype=bool)
        self._layout, self._cordoned = fleet.layout, None
        self._recent.clear()  # other node ids
        self.relayouts += 1
        self._empty(width)

    def _compute(
        self, fleet: FleetView, policy: PlacementPolicy, nodes: npt.NDArray[np.intp], now_ms: int
    ) -> None:
        rows = self.rows[nodes]
        at = rows[rows >= 0]  # node by node
        self._held[at] = fleet.held[at]
        if len(nodes) <= self._few_nodes:
            cordoned = self.cordoned[nodes].tolist()
            found = few_nodes.summarise(fleet, policy, rows.tolist(), cordoned, now_ms)
            for node, summary in zip(nodes.tolist(), found, strict=True):
                self._store(node, summary)
            self._unheld[at] = [state for summary in found for state in summary.unheld]
            return
        cordoned = self.cordoned[nodes]
        unheld, self.due[nodes] = row_states(fleet, policy, rows, cordoned, now_ms, holds=False)
        present = unheld >= 0
        self._unheld[at] = unheld[present]
        state = with_holds(fleet, unheld, rows)
        safe = np.where(present, rows, 0)
        self.tally[nodes] = state_tally(fleet, state, rows)
        qualifies = state == states.FREE
        free = np.where(qualifies, fleet.capacity[safe], -np.inf)
        self.capacity[nodes] = -np.sort(-free, axis=1)
        order = np.lexsort((fleet.index[safe], -fleet.score[safe], ~qualifies))
        ranked = np.where(qualifies, rows, -1)
        self.ranked[:, nodes] = np.take_along_axis(ranked, order, axis=1).T
        self.size[nodes] = present.sum(axis=1)
        model = fleet.model[safe]
        same = np.where(present, model == model[:, :1], True).all(axis=1)
        self.model[nodes] = np.where(same, model[:, 0], -1)
        mem = fleet.mem_bytes[safe]
        self.mem_lo[nodes] = np.where(present, mem, np.iinfo(np.int64).max).min(axis=1)
        self.mem_hi[nodes] = np.where(present, mem, -1).max(axis=1)

    def _update_holds(self, fleet: FleetView, nodes: list[int]) -> list[int]:
        """Bring up to date in place the summaries of ``nodes``, whose GPUs only changed
        hold since they were computed: a GPU that qualifies when free moves between FREE
        and ALLOCATED, and leaves or joins the node's capacities and placement order;
        nothing else of the node changes. ~10 us a node in plain Python, against ~60
        for a recomputation (core/few_nodes.py) and ~350 for numpy's calls. Returns the
        nodes it cannot do so (a GPU in another state changed hold), to recompute."""
        ids = np.array(nodes, dtype=np.intp)  # indexing with it costs a quarter of a list
        rows = self.rows[ids]
        at = rows[rows >= 0]  # node by node
        now_held = fleet.held[at]
        columns = (self._held, self._unheld, fleet.score, fleet.index, fleet.capacity)
        was, unheld, score, index, capacity = (column[at].tolist() for column in columns)
        held = now_held.tolist()
        self._held[at] = now_held
        row = at.tolist()
        slots, left, start = rows.shape[1], [], 0
        for node, size in zip(nodes, self.size[ids].tolist(), strict=True):
            mine = range(start, start + size)
            start += size
            if any(held[i] != was[i] and unheld[i] != states.FREE for i in mine):
                left.append(node)
                continue
            free = [
                (-score[i], index[i], row[i], capacity[i])
                for i in mine
                if unheld[i] == states.FREE and not held[i]
            ]
            self.tally[node, states.FREE] = len(free)
            self.tally[node, states.ALLOCATED] = sum(held[i] for i in mine)
            self.capacity[node], self.ranked[:, node] = few_nodes.placement_order(free, slots)
        return left

    def _store(self, node: int, summary: few_nodes.NodeRows) -> None:
        self.due[node] = summary.due
        self.tally[node] = summary.tally
        self.capacity[node] = summary.capacity
        self.ranked[:, node] = summary.ranked
        self.size[node] = summary.size
        self.model[node] = summary.model
        self.mem_lo[node] = summary.mem_lo
        self.mem_hi[node] = summary.mem_hi
