"""The placement choice at fleet scale (pure): per request shape, the nodes that can take
it, kept in the order the packing ranks them, so a decision reads the first few instead
of ranking every candidate of the fleet on each call.

``choose`` (core/placement.py) judges every GPU and ranks every node that fits, ~1 ms at
100k GPUs (12,500 nodes) even from the per-node summaries. Here each *ranking* holds, for
one shape (GPUs per node, packing, models, memory, the job's own model speeds), every
node that fits it, in a sorted list keyed by the same keys ``rank_nodes`` sorts by
(``rank_keys``: the last is the node name's rank, so no two nodes tie). Before a
decision it revisits the nodes the summaries recomputed since it last looked (a record,
a hold, a cordon or the clock changed them: ``NodeSummaries.computed``), O(changed
nodes); the decision then takes the head, O(nodes in the gang). Rankings are made on a
shape's first request and the least recently used is dropped beyond
``max_shapes``; a new layout (GPUs that appear or move, another policy) rebuilds them.

When fewer nodes fit than the gang needs, the answer is ``choose``'s own: its refusal
counts every GPU by reason, and ``best_available`` retries below the threshold.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable
from dataclasses import replace

import numpy as np
import numpy.typing as npt
from sortedcontainers import SortedList

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_states import ALLOCATED, FREE
from fairlane_scheduler.core.node_summary import FEW_NODES, NodeSummaries
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    NoPlacement,
    PlacementPolicy,
    choose,
    chosen,
    effective_capacity,
    packing_keys,
    rank_keys,
    share_key,
)
from fairlane_scheduler.core.placement_summary import summary_candidates
from fairlane_scheduler.core.replica_share import ReplicaShare

__all__ = ["MAX_SHAPES", "NodeRankings"]

#: Shapes ranked at once: each holds one entry per fitting node (~3 MiB at 12,500 nodes).
MAX_SHAPES = 8
_Key = tuple[float | int, ...]  # rank_keys' values of one node, then its id


class _Ranking:
    """The nodes that fit one shape, best first."""

    def __init__(
        self, shape: JobShape, resolution: float, share: ReplicaShare, few_nodes: int
    ) -> None:
        self.shape = replace(shape, nodes=1)  # any gang reads the same ranking
        self.resolution, self.share = resolution, share
        self._few_nodes = few_nodes  # re-ranked one at a time up to this many at once
        self._sorted: SortedList[_Key] = SortedList()
        self._key: dict[int, _Key] = {}  # node id -> its entry
        #: Per node id, its best rows for the shape and their slowest GPU's capacity, as
        #: of its last ranking (read for the nodes in the sorted list only).
        self._top: npt.NDArray[np.intp] = np.zeros((0, 0), dtype=np.intp)
        self._min_cap: npt.NDArray[np.float64] = np.zeros(0)
        self._refreshes = -1  # summaries.refreshes when last brought up to date
        self._relayouts = -1
        #: A node's fit for the shape reads its summary alone (no model or memory limit
        #: to judge GPU by GPU: core/placement_summary.py).
        self._by_summary_alone = shape.models is None and shape.min_gpu_memory_gib is None

    def catch_up(self, fleet: FleetView, summaries: NodeSummaries) -> None:
        """Re-rank the nodes the summaries recomputed since the last call (all of them
        after a new layout)."""
        relayout = summaries.relayouts != self._relayouts
        if relayout:
            self._sorted.clear()
            self._key.clear()
            self._relayouts = summaries.relayouts
            nodes: npt.NDArray[np.intp] = np.arange(len(fleet.nodes))
        elif summaries.refreshes != self._refreshes:
            recent = summaries.computed_since(self._refreshes)
            if recent is None:  # too long ago: read every node's stamp
                recent = np.flatnonzero(summaries.computed[: len(fleet.nodes)] > self._refreshes)
            nodes = recent
        else:
            return
        self._refreshes = summaries.refreshes
        for node in nodes.tolist() if self._key else ():
            if (old := self._key.pop(node, None)) is not None:
                self._sorted.remove(old)
        if not relayout and len(nodes) <= self._few_nodes and self._by_summary_alone:
            for node in nodes.tolist():
                self._rank_one(fleet, summaries, node)
            return
        candidates = summary_candidates(fleet, summaries, self.shape, nodes)
        keys, min_cap = rank_keys(fleet, self.shape, self.resolution, candidates, share=self.share)
        if relayout:  # node ids and the GPUs a node may have change
            self._top = np.full((len(fleet.nodes), candidates.top.shape[1]), -1, dtype=np.intp)
            self._min_cap = np.zeros(len(fleet.nodes))
        self._top[candidates.node_ids] = candidates.top
        self._min_cap[candidates.node_ids] = min_cap
        columns = [key.tolist() for key in keys]
        entries = list(zip(*columns, candidates.node_ids.tolist(), strict=True))
        self._key.update((entry[-1], entry) for entry in entries)
        self._sorted.update(entries)

    def _rank_one(self, fleet: FleetView, summaries: NodeSummaries, node: int) -> None:
        """What the rest of :meth:`catch_up` does, for one node, without numpy's ~25
        calls on arrays of one: its entry, if it fits the shape."""
        per_node = self.shape.gpus_per_node
        tally = summaries.tally[node].tolist()  # a fancy index of two columns costs 4x
        free, used = tally[FREE], tally[ALLOCATED]
        if free < per_node:
            return
        top = summaries.ranked[:per_node, node]
        capacity = effective_capacity(fleet, self.shape, top).tolist()
        min_cap, total_cap = min(capacity), sum(capacity)
        keys = packing_keys(
            self.shape.policy,
            self.resolution,
            min_cap=min_cap,
            total_cap=total_cap,
            used=used,
            size=summaries.size[node].item(),
            name_rank=fleet.name_rank()[node].item(),
            others=share_key(fleet, self.share, node),
        )
        entry = (*(float(key) for key in keys[:-1]), keys[-1], node)
        self._top[node], self._min_cap[node] = top, min_cap
        self._key[node] = entry
        self._sorted.add(entry)

    def head(self, fleet: FleetView, count: int) -> Choice | None:
        """The best ``count`` nodes as the choice; None when fewer fit."""
        if len(self._sorted) < count:
            return None
        ids = np.array([entry[-1] for entry in self._sorted.islice(0, count)], dtype=np.intp)
        return chosen(fleet, ids, self._top[ids], self._min_cap[ids])


class NodeRankings:
    """The rankings of the shapes requested lately, on one :class:`NodeSummaries` (one
    policy at a time, as the summaries follow one)."""

    def __init__(self, max_shapes: int = MAX_SHAPES, few_nodes: int = FEW_NODES) -> None:
        self.summaries = NodeSummaries(few_nodes)
        self._few_nodes = few_nodes
        self._max_shapes = max_shapes
        self._rankings: OrderedDict[Hashable, _Ranking] = OrderedDict()

    def choose(
        self, fleet: FleetView, shape: JobShape, policy: PlacementPolicy, now_ms: int
    ) -> Choice | NoPlacement:
        """``choose(fleet, shape, policy, fleet.held_rows(), now_ms)``, read from the
        ranking of ``shape``."""
        self.summaries.refresh(fleet, policy, now_ms)
        ranking = self._ranking(shape, policy.capacity_resolution, policy.share)
        ranking.catch_up(fleet, self.summaries)
        best = ranking.head(fleet, shape.nodes)
        if best is None:
            return choose(fleet, shape, policy, fleet.held_rows(), now_ms)
        return best

    def _ranking(self, shape: JobShape, resolution: float, share: ReplicaShare) -> _Ranking:
        speeds = None if shape.model_speeds is None else tuple(sorted(shape.model_speeds.items()))
        memory = shape.min_gpu_memory_gib
        key = (shape.gpus_per_node, shape.policy, shape.models, memory, speeds, resolution, share)
        ranking = self._rankings.get(key)
        if ranking is None:
            ranking = self._rankings[key] = _Ranking(shape, resolution, share, self._few_nodes)
            if len(self._rankings) > self._max_shapes:
                self._rankings.popitem(last=False)
        else:
            self._rankings.move_to_end(key)
        return ranking
