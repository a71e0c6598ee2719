"""Placement candidates read from per-node summaries (pure): of some nodes, those that can
take a job's GPUs per node and their best rows, as the full scan
(:func:`~fairlane_scheduler.core.placement.choose`) finds them, without judging every GPU.

The summaries (core/node_summary.py) keep, per node, its qualifying GPUs best score
first, recomputed only for the nodes that took a record or a hold since the last look,
so a node is read as a few numbers: its count of qualifying GPUs and its best rows. A job
limited to models or a memory size is judged GPU by GPU only on the nodes that mix them, and a job
with a job class re-sorts, by score x learned speed, the nodes where something is learned
under it. The ranking of the candidates (core/node_ranking.py) reads them for the nodes that
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
    order given, with those GPUs' best rows (best score first, then GPU index; best
    score x learned speed first with a job class)."""
    per_node = shape.gpus_per_node
    count = summaries.tally[nodes, FREE]
    ranked = summaries.ranked
    if (speeds := fleet.class_speeds(shape.job_class)) is not None:
        ranked = _by_learned_speed(fleet, speeds, ranked, nodes)
    top = ranked[:per_node].take(nodes, axis=1).T
    if shape.models is not None or shape.min_gpu_memory_gib is not None:
        count = _admitted(fleet, summaries, ranked, shape, nodes, count=count, top=top)
    fits = count >= per_node
    node_ids = nodes[fits]
    used = summaries.tally[node_ids, ALLOCATED]
    return NodeCandidates(node_ids, top[fits], used, summaries.size[node_ids])


def _by_learned_speed(
    fleet: FleetView,
    speeds: npt.NDArray[np.float64],
    ranked: npt.NDArray[np.intp],
    nodes: npt.NDArray[np.intp],
) -> npt.NDArray[np.intp]:
    """``ranked`` (slots x node ids, best score first, -1 padding) with the columns of
    ``nodes`` whose GPUs' learned ``speeds`` are not all 1.0 sorted again, best score x
    speed first (a stable sort: ties keep the score's order)."""
    rows = ranked[:, nodes]
    safe = np.where(rows >= 0, rows, 0)
    learned = speeds[safe]
    moved = np.flatnonzero(np.any((learned != 1.0) & (rows >= 0), axis=0))
    if not len(moved):
        return ranked
    rows, safe = rows[:, moved], safe[:, moved]
    capacity = np.where(rows >= 0, fleet.score[safe] * learned[:, moved], -np.inf)
    order = np.argsort(-capacity, axis=0, kind="stable")
    ranked = ranked.copy()
    ranked[:, nodes[moved]] = np.take_along_axis(rows, order, axis=0)
    return ranked


def _admitted(
    fleet: FleetView,
    summaries: NodeSummaries,
    ranked: npt.NDArray[np.intp],
    shape: JobShape,
    nodes: npt.NDArray[np.intp],
    *,
    count: npt.NDArray[np.int64],
    top: npt.NDArray[np.intp],
) -> npt.NDArray[np.int64]:
    """Qualifying GPUs per node of a model and size the job accepts; on the nodes that
    mix accepted and refused GPUs, ``top`` is set to their accepted rows, best first
    (in ``ranked``'s order)."""
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
        rows = ranked[:, nodes[mixed]].T
        safe = np.where(rows >= 0, rows, 0)
        accepted = (rows >= 0) & allowed[fleet.model[safe]] & (fleet.mem_bytes[safe] >= need)
        order = np.argsort(~accepted, axis=1, kind="stable")  # accepted first, still best first
        count[mixed] = accepted.sum(axis=1)
        ranked = np.take_along_axis(np.where(accepted, rows, -1), order, axis=1)
        top[mixed] = ranked[:, : top.shape[1]]
    return count
