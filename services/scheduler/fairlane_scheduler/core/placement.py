"""Placement on live scores (pure, vectorised over the fleet's columns).

Filter: a GPU qualifies when it is free, fresh (not stale, score record younger than
``stale_after_s``), of an allowed model, with enough memory, scores at or above the
threshold, and is not cooling. Choose: within a node the best-scoring GPUs are taken; a
multi-node job is a gang, all nodes or none. Between nodes:

- ``fastest``: a synchronous gang runs at its slowest GPU, so take the nodes whose best
  GPUs have the highest minimum effective capacity (that maximises the gang's minimum);
  effective capacity is score x model speed, the job's own per-model speeds when given,
  x the GPU's learned speed under the job's class when the job names one (then "best"
  within a node means best score x learned speed, too);
- ``binpack``: fill partly used nodes first (fewest free GPUs), keep whole nodes free;
- ``spread``: the least used nodes first.

Ties fall to higher capacity, then to the node name, so decisions are deterministic.
With several scheduler replicas each prefers its own share of the nodes among those the
packing ranks equal (core/replica_share.py, :func:`packing_keys`).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, replace
from typing import Any, Literal

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.partial_sort import smallest_by
from fairlane_scheduler.core.replica_share import ALONE, ReplicaShare

__all__ = [
    "NOT_ENOUGH_ON_NODE",
    "Choice",
    "JobShape",
    "NoPlacement",
    "NodeCandidates",
    "NodeChoice",
    "Packing",
    "PlacementPolicy",
    "best_per_node",
    "choose",
    "chosen",
    "effective_capacity",
    "learned_speeds",
    "packing_keys",
    "qualifying",
    "rank_keys",
    "rank_nodes",
    "rejection_masks",
    "rejections",
    "share_key",
    "speed_step",
]

#: How a job is packed between nodes (the request's ``policy`` field). Not to be mixed up
#: with :class:`PlacementPolicy` (how strict the filter is, from the settings) or
#: :class:`~fairlane_scheduler.core.fleet.StabilityPolicy` (when a GPU that dropped returns).
Packing = Literal["fastest", "binpack", "spread"]
_GIB = 1024**3
NOT_ENOUGH_ON_NODE = "on a node without enough qualifying GPUs"


@dataclass(frozen=True)
class JobShape:
    gpus_per_node: int
    nodes: int = 1
    min_gpu_memory_gib: float | None = None
    models: frozenset[str] | None = None  # catalogue keys; None = any
    policy: Packing = "fastest"
    #: This job's own speed on each GPU model (catalogue key -> any consistent unit, e.g.
    #: measured steps/s): effective capacity = score x it, instead of the catalogue's
    #: one-number prior. Models it does not name count as 0 (never preferred).
    model_speeds: Mapping[str, float] | None = None
    #: The job's class (``fairlane.gpu-speeds.v1``): effective capacity is then x each
    #: GPU's learned speed under it (1.0 where nothing is learned). None: scores alone.
    job_class: str | None = None


@dataclass(frozen=True)
class PlacementPolicy:
    """How strict the filter is.

    ``stale``: ``exclude`` leaves out GPUs without a fresh score (default);
    ``last_known`` places on the last score a GPU had, for when the scoring pipeline is
    down and a stale-but-known fleet beats refusing every job.
    ``below_threshold``: ``fail`` refuses when only GPUs below the threshold (or
    cooling) fit, saying so (default, fail closed); ``best_available`` then places on
    the best of them and marks the placement as a fallback.
    """

    threshold: float = 0.65
    stale_after_s: float = 180.0
    stale: Literal["exclude", "last_known"] = "exclude"
    below_threshold: Literal["fail", "best_available"] = "fail"
    #: ``fastest`` treats gangs whose slowest GPUs' effective capacities fall in the same
    #: step of this size as equally fast and packs them (fewest free GPUs first, as
    #: ``binpack``): score differences below the score's own noise are no information,
    #: and ranking by them scattered jobs and fragmented nodes (docs/evaluation.md).
    #: 0: rank by the exact value.
    capacity_resolution: float = 0.1
    #: With a job class, gangs in one capacity step are ranked next by their slowest
    #: GPU's learned speed, rounded to steps of this size: a learned factor of 0.92 is
    #: inside the score's 0.1 step, yet a measured 8 % (docs/scheduler.md). Rounded, not
    #: floored, so the typical GPUs' 1.0 +- noise stay one step. 0: the capacity alone.
    speed_resolution: float = 0.05
    #: This scheduler replica's share of the nodes, preferred among equally good ones.
    share: ReplicaShare = ALONE


@dataclass(frozen=True)
class NodeChoice:
    node: str
    rows: tuple[int, ...]  # fleet rows, best score first


@dataclass(frozen=True)
class NodeCandidates:
    """Nodes that can take the job's GPUs per node: their fleet node ids, their best
    qualifying rows (nodes x per node, best score first), and the GPUs each holds
    (``used``) of its ``size``."""

    node_ids: npt.NDArray[np.intp]
    top: npt.NDArray[np.intp]
    used: npt.NDArray[np.int64]
    size: npt.NDArray[np.int64]


@dataclass(frozen=True)
class Choice:
    nodes: tuple[NodeChoice, ...]  # node rank order
    min_capacity: float  # the gang's slowest GPU
    fallback: bool = False  # placed below the threshold (best_available policy)


@dataclass(frozen=True)
class NoPlacement:
    """Why nothing fits: how many GPUs were rejected for each reason."""

    reasons: Mapping[str, int]
    message: str = "not enough qualifying GPUs"

    def summary(self) -> str:
        parts = ", ".join(f"{n} {why}" for why, n in sorted(self.reasons.items()))
        return f"{self.message} ({parts or 'no GPUs known'})"


def rejection_masks(
    fleet: FleetView,
    shape: JobShape,
    policy: PlacementPolicy,
    allocated_rows: npt.NDArray[np.intp],
    now_ms: int,
) -> list[tuple[str, npt.NDArray[np.bool_]]]:
    """One boolean mask per reason, in the order reasons are reported (first wins)."""
    n = len(fleet)
    allocated = np.zeros(n, dtype=bool)
    allocated[allocated_rows] = True
    masks = [("allocated", allocated), ("cordoned", fleet.cordoned_rows())]
    if policy.stale == "exclude":
        too_old = fleet.ts_ms[:n] < now_ms - policy.stale_after_s * 1000
        masks.append(("stale", fleet.stale[:n] | too_old))
    if shape.models is not None:
        allowed = [i for i, key in enumerate(fleet.models) if key in shape.models]
        masks.append(("model not allowed", ~np.isin(fleet.model[:n], allowed)))
    if shape.min_gpu_memory_gib is not None:
        masks.append(("too little memory", fleet.mem_bytes[:n] < shape.min_gpu_memory_gib * _GIB))
    masks.append(("score below threshold", fleet.score[:n] < policy.threshold))
    masks.append(("cooling", fleet.cooling(now_ms)))
    return masks


_HEALTH_REASONS = ("score below threshold", "cooling")


def qualifying(masks: list[tuple[str, npt.NDArray[np.bool_]]], n: int) -> npt.NDArray[np.bool_]:
    """Rows no mask rejects."""
    rejected = np.zeros(n, dtype=bool)
    for _, mask in masks:
        rejected |= mask
    return ~rejected


def rejections(masks: list[tuple[str, npt.NDArray[np.bool_]]], n: int) -> Counter[str]:
    """How many rows each reason rejected first: for a refusal only, as counting costs
    ~4x what :func:`qualifying` does (28 vs 6 us at 1,000 GPUs)."""
    remaining = np.ones(n, dtype=bool)
    rejected: Counter[str] = Counter()
    for reason, mask in masks:
        hit = remaining & mask
        if count := int(np.count_nonzero(hit)):
            rejected[reason] = count
        remaining &= ~mask
    return rejected


def best_per_node(
    fleet: FleetView,
    ok: npt.NDArray[np.bool_],
    per_node: int,
    job_class: str | None = None,
) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.intp], int]:
    """Nodes with at least ``per_node`` qualifying rows, their best rows (nodes x per_node,
    best score first; best score x learned speed under ``job_class`` when given), and
    how many qualifying rows sit on nodes with too few."""
    order = fleet.rows_by_node(job_class)
    rows = order[ok[order]]
    nodes = fleet.node[rows]
    if len(rows):
        starts = np.concatenate(([0], np.flatnonzero(nodes[1:] != nodes[:-1]) + 1))
    else:
        starts = rows
    counts = np.diff(starts, append=len(rows))
    node_ids = nodes[starts].astype(np.intp)
    enough = counts >= per_node
    top = rows[starts[enough][:, None] + np.arange(per_node)]
    return node_ids[enough], top, int(counts[~enough].sum())


def choose(
    fleet: FleetView,
    shape: JobShape,
    policy: PlacementPolicy,
    allocated: Collection[str] | npt.NDArray[np.intp],
    now_ms: int,
) -> Choice | NoPlacement:
    """``allocated``: the GPUs live placements hold, by uuid or as fleet rows."""
    allocated_rows = allocated if isinstance(allocated, np.ndarray) else fleet.rows_of(allocated)
    masks = rejection_masks(fleet, shape, policy, allocated_rows, now_ms)
    result = _choose(fleet, shape, masks, allocated_rows, policy)
    if isinstance(result, NoPlacement) and policy.below_threshold == "best_available":
        lenient = [(r, m) for r, m in masks if r not in _HEALTH_REASONS]
        fallback = _choose(fleet, shape, lenient, allocated_rows, policy)
        if isinstance(fallback, Choice):
            return replace(fallback, fallback=True)
    return result


def learned_speeds(
    fleet: FleetView, shape: JobShape, rows: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64] | None:
    """These rows' learned speeds under the job's class; None without a class or with
    nothing learned under it (1.0 everywhere)."""
    column = fleet.class_speeds(shape.job_class)
    return None if column is None else column[rows]


def effective_capacity(
    fleet: FleetView, shape: JobShape, rows: npt.NDArray[np.intp]
) -> npt.NDArray[np.float64]:
    """These rows' effective capacity for this job: score x the model's speed, the job's
    own speeds when it gives them, else the catalogue's prior (the fleet's column), x
    the learned speed under the job's class (:func:`learned_speeds`)."""
    if shape.model_speeds is None:
        speeds = None
    else:
        speeds = np.array([shape.model_speeds.get(key, 0.0) for key in fleet.models] or [0.0])
    capacity: npt.NDArray[np.float64] = (
        fleet.capacity[rows] if speeds is None else fleet.score[rows] * speeds[fleet.model[rows]]
    )
    learned = learned_speeds(fleet, shape, rows)
    return capacity if learned is None else capacity * learned


def _min_and_sum_by_row(
    values: npt.NDArray[np.float64],
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Each row's minimum and sum, a column at a time: rows are a job's few GPUs per
    node, and numpy's reductions along a short inner axis cost ~14x more than this at
    12,500 nodes."""
    low, total = values[:, 0].copy(), values[:, 0].copy()
    for column in values.T[1:]:
        np.minimum(low, column, out=low)
        total += column
    return low, total


def rank_keys(
    fleet: FleetView,
    shape: JobShape,
    resolution: tuple[float, float],
    candidates: NodeCandidates,
    *,
    share: ReplicaShare,
) -> tuple[list[npt.NDArray[np.float64] | npt.NDArray[np.intp]], npt.NDArray[np.float64]]:
    """The keys the packing ranks candidates by (the first the most significant, the
    smallest first; the last is the node name's rank, so no two candidates tie), and
    each candidate's slowest GPU's effective capacity. ``resolution``: the capacity's
    and the learned speed's (:class:`PlacementPolicy`)."""
    min_cap, total_cap = _min_and_sum_by_row(effective_capacity(fleet, shape, candidates.top))
    learned = learned_speeds(fleet, shape, candidates.top)
    name_rank = fleet.name_rank()[candidates.node_ids]
    keys = packing_keys(
        shape.policy,
        resolution,
        min_speed=None if learned is None else _min_and_sum_by_row(learned)[0],
        min_cap=min_cap,
        total_cap=total_cap,
        used=candidates.used,
        size=candidates.size,
        name_rank=name_rank,
        others=share_key(fleet, share, candidates.node_ids),
    )
    return keys, min_cap


def share_key(fleet: FleetView, share: ReplicaShare, nodes: Any) -> Any:
    """:func:`packing_keys`' ``others`` of these node ids (an array of them, or one):
    1.0 for another replica's share, 0.0 for this one's; None for a single replica."""
    return None if share.alone else fleet.others_share(share)[nodes]


def packing_keys(
    policy: Packing,
    resolution: tuple[float, float],
    *,
    min_speed: Any = None,
    min_cap: Any,
    total_cap: Any,
    used: Any,
    size: Any,
    name_rank: Any,
    others: Any = None,
    floor: Callable[[Any], Any] = np.floor,
) -> list[Any]:
    """:func:`rank_keys` from each candidate's slowest and total effective capacity, GPUs
    used and size, name's rank and, with several replicas, whether it is another
    replica's share (``others``, :func:`share_key`; None: one replica, no such key):
    arrays of candidates, or the numbers of one (then ``floor`` may be
    :func:`math.floor`: the same value, ~15x cheaper on one number).

    Where the share key sits decides what it may override. ``fastest`` and ``spread``:
    right after the packing's own first key (the capacity step; the used share), so a
    replica never leaves the fastest step (the least used nodes) for its share, but
    among those it packs (spreads over) its own nodes first; replicas meet once a share
    has no node left in that step (with ``resolution`` 0 the step is the exact capacity,
    which seldom ties, so ``fastest`` replicas still meet). ``min_speed``, each
    candidate's slowest learned speed (None: no class), is ranked right after the
    capacity step, in steps of the second ``resolution``, and ``fastest``'s share key
    after it. ``binpack``: first, so each
    replica fills the nodes of its share before it touches another's. After the fewest
    free GPUs it would break few ties: every replica sees the same most-packed node and
    takes it, the collision it is there to avoid. The price is up to one partly used
    node per replica instead of one in all.
    """
    free = (size - used) * 1.0
    capacity_step, speed_resolution = resolution
    share_at = 0 if policy == "binpack" else 1
    if capacity_step > 0:
        # Capacities inside one resolution step are equal; equally fast gangs are packed.
        steps = [-floor(min_cap / capacity_step + 1e-9)]
        if min_speed is not None:
            steps.append(speed_step(min_speed, speed_resolution, floor))
            share_at += policy == "fastest"
        by = {"fastest": [*steps, free], "binpack": [free, *steps], "spread": [used / size, *steps]}
        keys = by[policy]
    else:
        first = {"fastest": -min_cap, "binpack": free, "spread": used / size}
        keys = [first[policy], -min_cap, -total_cap]
    if others is not None:
        keys.insert(share_at, others)
    return [*keys, name_rank]


def speed_step(min_speed: Any, resolution: float, floor: Callable[[Any], Any] = np.floor) -> Any:
    """The learned-speed key (smallest first) of a candidate whose slowest learned speed
    is ``min_speed`` (an array of them, or one):
    ``-floor(min_speed / resolution + 0.5)``, the speed rounded to the nearest step of
    ``resolution``, not floored, so 1.0 +- noise is one step (:class:`PlacementPolicy`'s
    ``speed_resolution``); ``-min_speed`` with ``resolution`` 0. Whole GPUs rank it after
    the capacity step (:func:`packing_keys`), shares before the sharing rule's own keys
    (core/share_decision.py)."""
    return -floor(min_speed / resolution + 0.5) if resolution > 0 else -min_speed


def chosen(
    fleet: FleetView,
    node_ids: npt.NDArray[np.intp],
    top: npt.NDArray[np.intp],
    min_cap: npt.NDArray[np.float64],
) -> Choice:
    """These nodes, in this order, with their rows (``top``) as the choice; ``min_cap``:
    each one's slowest GPU's effective capacity."""
    nodes = tuple(
        NodeChoice(fleet.nodes[node], tuple(rows))
        for node, rows in zip(node_ids.tolist(), top.tolist(), strict=True)
    )
    return Choice(nodes, float(min_cap.min()))


def rank_nodes(
    fleet: FleetView,
    shape: JobShape,
    policy: PlacementPolicy,
    candidates: NodeCandidates,
) -> Choice:
    """The gang of ``shape.nodes`` candidates the packing prefers (at least that many)."""
    resolution = (policy.capacity_resolution, policy.speed_resolution)
    keys, min_cap = rank_keys(fleet, shape, resolution, candidates, share=policy.share)
    order = smallest_by(keys, shape.nodes)
    return chosen(fleet, candidates.node_ids[order], candidates.top[order], min_cap[order])


def _choose(
    fleet: FleetView,
    shape: JobShape,
    masks: list[tuple[str, npt.NDArray[np.bool_]]],
    allocated_rows: npt.NDArray[np.intp],
    policy: PlacementPolicy,
) -> Choice | NoPlacement:
    n, per_node = len(fleet), shape.gpus_per_node
    node_ids, top, short = best_per_node(fleet, qualifying(masks, n), per_node, shape.job_class)
    if len(node_ids) < shape.nodes:
        rejected = rejections(masks, n)
        if short:
            rejected[NOT_ENOUGH_ON_NODE] = short
        wanted = f"{shape.nodes} node(s) with {per_node} qualifying GPUs each"
        return NoPlacement(dict(rejected), f"need {wanted}, found {len(node_ids)}")
    size = np.bincount(fleet.node[:n], minlength=len(fleet.nodes))[node_ids]
    used = np.bincount(fleet.node[allocated_rows], minlength=len(fleet.nodes))[node_ids]
    return rank_nodes(fleet, shape, policy, NodeCandidates(node_ids, top, used, size))
