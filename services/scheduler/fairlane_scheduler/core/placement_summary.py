"""Placement candidates read from per-node summaries (pure): of some nodes, those that can
take a job's GPUs per node and their best rows, as the full scan
(:func:`~fairlane_scheduler.core.placement.choose`) finds them, without judging every GPU.

The summaries (core/node_summary.py) keep, per node, its qualifying GPUs best score
first, recomputed only for the nodes that took a record or a hold since the last look,
so a node is read as a few numbers: its count of qualifying GPUs and its best rows. A job
limited to models or a memory size is judged GPU by GPU only on the nodes that mix them.
The ranking of the candidates (core/node_ranking.py) reads them for the nodes that
changed only.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_states import ALLOCATED, FREE
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import JobShape, NodeCandidates

__all__ = ["summary_candidates"]

_GIB = 1024**3


def summary_candidates(
    fleet: FleetView,
    summaries: NodeSummaries,
    shape: JobShape,
    nodes: npt.NDArray[np.intp],
) -> NodeCandidates:
    """Of the fleet node ids ``nodes`` (summaries refreshed), those with at least
    ``shape.gpus_per_node`` qualifying GPUs of a model and size the job accepts, in the
    order given, with those GPUs' best rows (best score first, then GPU index)."""
    per_node = shape.gpus_per_node
    count = summaries.tally[nodes, FREE]
    top = summaries.ranked[:per_node].take(nodes, axis=1).T
    if shape.models is not None or shape.min_gpu_memory_gib is not None:
        count = _admitted(fleet, summaries, shape, nodes, count=count, top=top)
    fits = count >= per_node
    node_ids = nodes[fits]
    used = summaries.tally[node_ids, ALLOCATED]
    return NodeCandidates(node_ids, top[fits], used, summaries.size[node_ids])


def _admitted(
    fleet: FleetView,
    summaries: NodeSummaries,
    shape: JobShape,
    nodes: npt.NDArray[np.intp],
    *,
    count: npt.NDArray[np.int64],
    top: npt.NDArray[np.intp],
) -> npt.NDArray[np.int64]:
    """Qualifying GPUs per node of a model and size the job accepts; on the nodes that
    mix accepted and refused GPUs, ``top`` is set to their accepted rows, best first."""
    model, lo, hi = summaries.model[nodes], summaries.mem_lo[nodes], summaries.mem_hi[nodes]
    every, none = np.ones(len(nodes), dtype=bool), np.zeros(len(nodes), dtype=bool)
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
    if len(mixed):
        rows = summaries.ranked[:, nodes[mixed]].T
        safe = np.where(rows >= 0, rows, 0)
        accepted = (rows >= 0) & allowed[fleet.model[safe]] & (fleet.mem_bytes[safe] >= need)
        order = np.argsort(~accepted, axis=1, kind="stable")  # accepted first, still best first
        count[mixed] = accepted.sum(axis=1)
        ranked = np.take_along_axis(np.where(accepted, rows, -1), order, axis=1)
        top[mixed] = ranked[:, : top.shape[1]]
    return count
