"""The placement choice read from per-node summaries (pure): the same decision as
:func:`~fairlane_scheduler.core.placement.choose` on the GPUs placements hold, without
judging every GPU of the fleet on every call.

``choose`` builds a mask per reason over all rows and groups the qualifying ones by
node, 4-24 ms a call at 100k GPUs (12,500 nodes), most of it re-sorting the fleet after
scores changed. The summaries (core/node_summary.py) keep, per node, its qualifying GPUs
best score first, recomputed only for the nodes that took a record or a hold since the
last call, so a decision reads a few numbers per node: the nodes with enough qualifying
GPUs, their best rows, and ranks them as ``choose`` does (:func:`rank_nodes`). A job
limited to models or a memory size is judged GPU by GPU only on the nodes that mix them.

When too few nodes fit, the answer is ``choose``'s own: its refusal counts every GPU by
reason, and ``best_available`` retries below the threshold. A refusal is the rare path.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_summary import ALLOCATED, FREE, NodeSummaries
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    NodeCandidates,
    NoPlacement,
    PlacementPolicy,
    choose,
    rank_nodes,
)

__all__ = ["choose_on_summaries"]

_GIB = 1024**3


def choose_on_summaries(
    fleet: FleetView,
    summaries: NodeSummaries,
    shape: JobShape,
    policy: PlacementPolicy,
    now_ms: int,
) -> Choice | NoPlacement:
    """``choose(fleet, shape, policy, fleet.held_rows(), now_ms)``, from ``summaries``
    (refreshed first; keep one per policy, as they follow one policy at a time)."""
    summaries.refresh(fleet, policy, now_ms)
    width, per_node = len(fleet.nodes), shape.gpus_per_node
    count = summaries.tally[:width, FREE]
    mixed = np.zeros(0, dtype=np.intp)
    if shape.models is not None or shape.min_gpu_memory_gib is not None:
        count, mixed, mixed_ranked = _admitted(fleet, summaries, shape, count)
    node_ids = np.flatnonzero(count >= per_node)
    if len(node_ids) < shape.nodes:
        return choose(fleet, shape, policy, fleet.held_rows(), now_ms)
    top = summaries.ranked[:per_node].take(node_ids, axis=1).T
    if len(mixed):
        at = np.searchsorted(node_ids, mixed)
        fits = (at < len(node_ids)) & (node_ids[np.minimum(at, len(node_ids) - 1)] == mixed)
        top[at[fits]] = mixed_ranked[fits, :per_node]
    used = summaries.tally[:, ALLOCATED].take(node_ids)
    candidates = NodeCandidates(node_ids, top, used, summaries.size.take(node_ids))
    return rank_nodes(fleet, shape, policy.capacity_resolution, candidates)


def _admitted(
    fleet: FleetView,
    summaries: NodeSummaries,
    shape: JobShape,
    count: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.intp], npt.NDArray[np.intp]]:
    """Qualifying GPUs per node of a model and size the job accepts; and the nodes that
    mix accepted and refused GPUs, with their accepted qualifying rows, best first."""
    width = len(count)
    model, lo, hi = (a[:width] for a in (summaries.model, summaries.mem_lo, summaries.mem_hi))
    every, none = np.ones(width, dtype=bool), np.zeros(width, dtype=bool)
    allowed = np.ones(max(len(fleet.models), 1), dtype=bool)
    need = -np.inf
    if shape.models is not None:
        allowed = np.array([key in shape.models for key in fleet.models] or [False])
        uniform = model >= 0
        every &= uniform & allowed[np.maximum(model, 0)]
        none |= uniform & ~allowed[np.maximum(model, 0)]
    if shape.min_gpu_memory_gib is not None:
        need = shape.min_gpu_memory_gib * _GIB
        every &= lo >= need
        none |= hi < need
    count = np.where(none, 0, count)
    mixed = np.flatnonzero(~every & ~none)
    rows = summaries.ranked[:, mixed].T
    safe = np.where(rows >= 0, rows, 0)
    accepted = (rows >= 0) & allowed[fleet.model[safe]] & (fleet.mem_bytes[safe] >= need)
    order = np.argsort(~accepted, axis=1, kind="stable")  # accepted first, still best first
    count[mixed] = accepted.sum(axis=1)
    return count, mixed, np.take_along_axis(np.where(accepted, rows, -1), order, axis=1)
