"""The placement choice at fleet scale (pure): per request shape, the nodes that can take
it, kept in the order the packing ranks them, so a decision reads the first few instead
of ranking every candidate of the fleet on each call.

``choose`` (core/placement.py) judges every GPU and ranks every node that fits, ~1 ms at
100k GPUs (12,500 nodes) even from the per-node summaries. Here each *ranking* holds, for
one shape (GPUs per node, packing, models, memory, the job's own model speeds, its job
class), every
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

import math
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
    NodeChoice,
    NoPlacement,
    PlacementPolicy,
    choose,
    effective_capacity,
    packing_keys,
    rank_keys,
    share_key,
)
from fairlane_scheduler.core.placement_summary import summary_candidates
from fairlane_scheduler.core.replica_share import ReplicaShare

__all__ = ["FEW_RANKED", "MAX_SHAPES", "NodeRankings"]

#: Shapes ranked at once: each holds one entry per fitting node (~3 MiB at 12,500 nodes).
MAX_SHAPES = 8
#: Up to this many changed nodes are re-ranked in plain Python, more with numpy: the
#: crossover of the two (~45 us either way at 125 nodes, ~140 at 12,500).
FEW_RANKED = 12
_Key = tuple[float | int, ...]  # rank_keys' values of one node, then its id


class _Ranking:
    """The nodes that fit one shape, best first."""

    def __init__(
        self, shape: JobShape, resolution: tuple[float, float], share: ReplicaShare, few_nodes: int
    ) -> None:
        self.shape = replace(shape, nodes=1)  # any gang reads the same ranking
        self.resolution, self.share = resolution, share
        self._few_nodes = few_nodes  # re-ranked in plain Python up to this many at once
        self._sorted: SortedList[_Key] = SortedList()
        #: Per node id in the sorted list: its entry there, its best rows for the shape
        #: and their slowest GPU's effective capacity, as of its last ranking.
        self._ranked: dict[int, tuple[_Key, tuple[int, ...], float]] = {}
        self._refreshes = -1  # summaries.refreshes when last brought up to date
        self._relayouts = -1
        #: A node's fit for the shape reads its summary alone (no model or memory limit
        #: to judge GPU by GPU, no class whose learned speeds reorder a node's GPUs:
        #: core/placement_summary.py).
        self._by_summary_alone = (
            shape.models is None and shape.min_gpu_memory_gib is None and shape.job_class is None
        )

    def catch_up(self, fleet: FleetView, summaries: NodeSummaries) -> None:
        """Re-rank the nodes the summaries recomputed since the last call (all of them
        after a new layout)."""
        if summaries.relayouts != self._relayouts:
            self._sorted.clear()
            self._ranked.clear()
            self._relayouts, self._refreshes = summaries.relayouts, summaries.refreshes
            self._rank_many(fleet, summaries, np.arange(len(fleet.nodes)))
            return
        if summaries.refreshes == self._refreshes:
            return
        nodes = summaries.computed_since(self._refreshes)
        if nodes is None:  # too long ago: read every node's stamp
            stamps = summaries.computed[: len(fleet.nodes)]
            nodes = np.flatnonzero(stamps > self._refreshes).tolist()
        self._refreshes = summaries.refreshes
        for node in nodes:
            if (old := self._ranked.pop(node, None)) is not None:
                self._sorted.remove(old[0])
        if len(nodes) <= self._few_nodes and self._by_summary_alone:
            self._rank_few(fleet, summaries, nodes)
        else:
            self._rank_many(fleet, summaries, np.array(nodes, dtype=np.intp))

    def _rank_many(
        self, fleet: FleetView, summaries: NodeSummaries, nodes: npt.NDArray[np.intp]
    ) -> None:
        """Rank ``nodes`` (none of them in the sorted list) with numpy."""
        candidates = summary_candidates(fleet, summaries, self.shape, nodes)
        keys, min_cap = rank_keys(fleet, self.shape, self.resolution, candidates, share=self.share)
        node_ids = candidates.node_ids.tolist()
        entries = list(zip(*(key.tolist() for key in keys), node_ids, strict=True))
        found = zip(entries, map(tuple, candidates.top.tolist()), min_cap.tolist(), strict=True)
        self._ranked.update(zip(node_ids, found, strict=True))
        self._sorted.update(entries)

    def _rank_few(self, fleet: FleetView, summaries: NodeSummaries, nodes: list[int]) -> None:
        """What :meth:`_rank_many` does, for a few nodes, in plain Python but a gather
        per column: numpy's ~40 calls on arrays of a few cost more than the work. The
        keys are :func:`packing_keys`' own, on Python numbers."""
        if not nodes:
            return
        per_node, policy = self.shape.gpus_per_node, self.shape.policy
        ids = np.array(nodes, dtype=np.intp)
        tallies = summaries.tally[ids].tolist()
        fit = [i for i, tally in enumerate(tallies) if tally[FREE] >= per_node]
        if not fit:
            return
        ids = ids[fit]
        top = summaries.ranked[:per_node, ids]
        capacities = effective_capacity(fleet, self.shape, top).T.tolist()
        sizes, name_ranks = summaries.size[ids].tolist(), fleet.name_rank()[ids].tolist()
        others = share_key(fleet, self.share, ids)
        shares = [None] * len(fit) if others is None else others.tolist()
        for at, rows, capacity, size, name_rank, other in zip(
            fit, top.T.tolist(), capacities, sizes, name_ranks, shares, strict=True
        ):
            low, total = min(capacity), capacity[0]
            for more in capacity[1:]:  # left to right as numpy; sum() compensates from 3.12
                total += more
            keys = packing_keys(
                policy,
                self.resolution,
                min_cap=low,
                total_cap=total,
                used=tallies[at][ALLOCATED],
                size=size,
                name_rank=name_rank,
                others=other,
                floor=math.floor,
            )
            entry = (*keys, nodes[at])
            self._ranked[nodes[at]] = (entry, tuple(rows), low)
            self._sorted.add(entry)

    def head(self, fleet: FleetView, count: int) -> Choice | None:
        """The best ``count`` nodes as the choice; None when fewer fit."""
        if len(self._sorted) < count:
            return None
        best = [self._sorted[0]] if count == 1 else self._sorted.islice(0, count)
        ids = [int(entry[-1]) for entry in best]
        picked = [self._ranked[node] for node in ids]
        nodes = tuple(
            NodeChoice(fleet.nodes[node], rows)
            for node, (_, rows, _) in zip(ids, picked, strict=True)
        )
        return Choice(nodes, min(min_cap for *_, min_cap in picked))


class NodeRankings:
    """The rankings of the shapes requested lately, on one :class:`NodeSummaries` (one
    policy at a time, as the summaries follow one)."""

    def __init__(
        self, max_shapes: int = MAX_SHAPES, few_nodes: int = FEW_NODES, few_ranked: int = FEW_RANKED
    ) -> None:
        self.summaries = NodeSummaries(few_nodes)
        self._few_ranked = few_ranked
        self._max_shapes = max_shapes
        self._rankings: OrderedDict[Hashable, _Ranking] = OrderedDict()

    def choose(
        self, fleet: FleetView, shape: JobShape, policy: PlacementPolicy, now_ms: int
    ) -> Choice | NoPlacement:
        """``choose(fleet, shape, policy, fleet.held_rows(), now_ms)``, read from the
        ranking of ``shape``."""
        self.summaries.refresh(fleet, policy, now_ms)
        resolution = (policy.capacity_resolution, policy.speed_resolution)
        ranking = self._ranking(shape, resolution, policy.share)
        ranking.catch_up(fleet, self.summaries)
        best = ranking.head(fleet, shape.nodes)
        if best is None:
            return choose(fleet, shape, policy, fleet.held_rows(), now_ms)
        return best

    def _ranking(
        self, shape: JobShape, resolution: tuple[float, float], share: ReplicaShare
    ) -> _Ranking:
        speeds = None if shape.model_speeds is None else tuple(sorted(shape.model_speeds.items()))
        wanted = (shape.gpus_per_node, shape.policy, shape.models, shape.min_gpu_memory_gib)
        key = (*wanted, speeds, shape.job_class, resolution, share)
        ranking = self._rankings.get(key)
        if ranking is None:
            ranking = self._rankings[key] = _Ranking(shape, resolution, share, self._few_ranked)
            if len(self._rankings) > self._max_shapes:
                self._rankings.popitem(last=False)
        else:
            self._rankings.move_to_end(key)
        return ranking
