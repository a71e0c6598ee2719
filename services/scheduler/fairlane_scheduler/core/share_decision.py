"""One fractional placement decision (pure, issue 29): a share of one GPU, on a GPU with
room for it, chosen by the packing rule of :mod:`~fairlane_scheduler.core.sharing`.

Health filters as for whole GPUs (fresh, not cordoned, model and memory fit, score at
or above the threshold, not cooling); a GPU a whole placement holds has no room (it
counts 1000), nor has one whose fractional tenants leave too little share or memory.
The rule sees every usable GPU of the fleet, held ones included, since a node's
fragmentation depends on all of its GPUs. With a job class, GPUs rank first by their
learned speed under it, in the whole-GPU path's rounded steps
(:func:`~fairlane_scheduler.core.placement.speed_step`), and the rule chooses among those
of the best step with room: a GPU learned slow for the class is taken only when no GPU
a step faster has room (a learned speed never excludes a GPU, as for whole GPUs). The
answer is the whole-GPU assembly of that one GPU, its slot carrying the share and
memory, and the node the environment that keeps the job inside them
(:func:`~fairlane_scheduler.core.shares.share_env`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from fairlane_events.gpu_models import CATALOG
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.ledger import Ledger
from fairlane_scheduler.core.master_port import PortRange, next_free_port
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    NodeChoice,
    PlacementPolicy,
    effective_capacity,
    learned_speeds,
    qualifying,
    rejection_masks,
    rejections,
    speed_step,
)
from fairlane_scheduler.core.placements import Placement, PlacementRequest, assemble
from fairlane_scheduler.core.quota import Quota, QuotaVerdict, models_within_quota
from fairlane_scheduler.core.shares import SHARE_SCALE, share_env, share_milli
from fairlane_scheduler.core.sharing import (
    DEFAULT_MIX,
    RoomTable,
    ShareAsk,
    SharingRule,
    WorkloadMix,
    rank_rooms,
)
from fairlane_scheduler.errors import NoCapacityError, QuotaExceededError

__all__ = ["NO_ROOM", "ShareTarget", "decide_share", "gpu_memory_mib"]

NO_ROOM = "without room for the share"
_MIB = 1024**2


def gpu_memory_mib(fleet: FleetView, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.int64]:
    """Each row's GPU memory in MiB: as its score record reports it, else its catalogue
    model's; 0 for an unknown model that reports none (such a GPU is never shared)."""
    catalogue = np.array(
        [round(CATALOG[m].mem_gib * 1024) if m in CATALOG else 0 for m in fleet.models] or [0]
    )
    reported = fleet.mem_bytes[rows]
    by_model = catalogue[fleet.model[rows]]
    memory: npt.NDArray[np.int64] = np.where(reported > 0, reported // _MIB, by_model)
    return memory


@dataclass(frozen=True)
class ShareTarget:
    """What a share is decided on: the fleet, what live placements hold, the namespace's
    quota, the filter's policy and the MASTER_PORT range."""

    fleet: FleetView
    ledger: Ledger
    quota: Quota | None
    policy: PlacementPolicy
    ports: PortRange


def decide_share(
    request: PlacementRequest,
    on: ShareTarget,
    *,
    placement_id: str,
    now_ms: int,
    mix: WorkloadMix = DEFAULT_MIX,
    rule: SharingRule = "fgd",
) -> Placement:
    """The placement of fractional ``request`` (``gpu_share`` set), or
    :class:`QuotaExceededError` / :class:`NoCapacityError` as
    :func:`~fairlane_scheduler.core.decision.decide` raises."""
    assert request.gpu_share is not None
    fleet, ledger, quota, policy = on.fleet, on.ledger, on.quota, on.policy
    milli = share_milli(request.gpu_share)
    shape = JobShape(
        gpus_per_node=1,
        min_gpu_memory_gib=request.min_gpu_memory_gib,
        models=request.models,
        policy=request.policy,
        job_class=request.job_class,
    )
    if quota is not None:
        used = ledger.usage(request.namespace)
        allowed = models_within_quota(quota, used, shape.models, fleet.models, milli / SHARE_SCALE)
        if isinstance(allowed, QuotaVerdict):
            raise QuotaExceededError.of(allowed.reason, ever=allowed.ever)
        shape = replace(shape, models=allowed)
    n = len(fleet)
    shared = fleet.rows_of(ledger.shared_gpus)
    whole = np.zeros(n, dtype=bool)
    whole[fleet.held_rows()] = True
    whole[shared] = False
    masks = rejection_masks(fleet, shape, policy, np.flatnonzero(whole), now_ms)
    health = [(reason, mask) for reason, mask in masks if reason != "allocated"]
    rows = _stable_order(fleet, np.flatnonzero(qualifying(health, n)))
    if request.on_node is not None:  # the Kubernetes extender's bind: its node only
        node_id = fleet.node_id(request.on_node)
        rows = rows[fleet.node[rows] == (-1 if node_id is None else node_id)]
    memory = gpu_memory_mib(fleet, rows)
    rows, memory = rows[memory > 0], memory[memory > 0]
    table = _rooms(
        fleet,
        ledger,
        rows=rows,
        memory=memory,
        whole=whole[rows],
        shape=shape,
        speed_resolution=policy.speed_resolution,
    )
    ask = ShareAsk(milli, request.gpu_memory_mib)
    keep = _on_nodes_with_room(table, ask)
    if rule != "first-fit":  # its first choice is the first row, whatever the capacity
        keep &= _one_of_each_untouched_kind(table)
    ranked = rank_rooms(_subset(table, keep), ask, mix, rule)
    if not len(ranked):
        rejected = rejections(masks, n)
        if room_less := int(np.count_nonzero(~whole[rows])):
            rejected[NO_ROOM] = room_less
        raise NoCapacityError(f"no GPU with room for a share of {milli}/1000", dict(rejected))
    rows, memory = rows[keep], memory[keep]
    best = int(ranked[0])
    row, gpu_memory = int(rows[best]), int(memory[best])
    node = fleet.nodes[int(fleet.node[row])]
    port = next_free_port(ledger.ports(node), on.ports)
    if port is None:
        raise NoCapacityError(f"no free MASTER_PORT on {node}", {"ports": 1})
    capacity = effective_capacity(fleet, shape, np.array([row]))
    choice = Choice((NodeChoice(node, (row,)),), float(capacity[0]))
    placement = assemble(
        request, fleet, choice, port=port, placement_id=placement_id, now_ms=now_ms
    )
    memory_mib = int(ask.memory_on(np.array([gpu_memory]))[0])
    return _with_share(placement, milli, memory_mib, gpu_memory)


def _stable_order(fleet: FleetView, rows: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """``rows`` by node name, then GPU index: replicas with one view choose alike."""
    order = np.lexsort((fleet.index[rows], fleet.name_rank()[fleet.node[rows]]))
    ordered: npt.NDArray[np.intp] = rows[order]
    return ordered


def _rooms(
    fleet: FleetView,
    ledger: Ledger,
    *,
    rows: npt.NDArray[np.intp],
    memory: npt.NDArray[np.int64],
    whole: npt.NDArray[np.bool_],
    shape: JobShape,
    speed_resolution: float,
) -> RoomTable:
    """The rule's columns for these rows: a whole placement's GPU is full (1000 and all
    of its memory), a shared one holds what its tenants do. Capacity is the whole-GPU
    path's effective capacity (score x learned speed under the share's class x model
    speed); with a class something is learned under, the learned speed's rounded step
    (``speed_step``, as whole GPUs rank it) is ranked before the rule."""
    used = np.zeros((3, len(fleet)), dtype=np.int64)  # share, memory, tenants per fleet row
    for uuid in ledger.shared_gpus:  # few: the fleet is walked in numpy only
        if (row := fleet.row.get(uuid)) is not None:
            used[:, row] = ledger.shares(uuid)
    used_milli, used_memory, tenants = used[:, rows]
    _, node_codes = np.unique(fleet.node[rows], return_inverse=True)
    learned = learned_speeds(fleet, shape, rows)
    return RoomTable(
        node=node_codes.astype(np.int64),
        used_milli=np.where(whole, SHARE_SCALE, used_milli),
        used_memory_mib=np.where(whole, memory, np.minimum(used_memory, memory)),
        memory_mib=memory.astype(np.int64),
        tenants=tenants,
        capacity=effective_capacity(fleet, shape, rows).astype(np.float64),
        speed_key=None if learned is None else speed_step(learned, speed_resolution),
    )


def _on_nodes_with_room(table: RoomTable, ask: ShareAsk) -> npt.NDArray[np.bool_]:
    """The rows on nodes where some GPU has room for ``ask``: the rule's measure is per
    node, so the other nodes change no candidate's rank and are left out of its work."""
    room = (table.free_milli >= ask.milli) & (
        table.free_memory_mib >= ask.memory_on(table.memory_mib)
    )
    on: npt.NDArray[np.bool_] = np.isin(table.node, table.node[room])
    return on


def _one_of_each_untouched_kind(table: RoomTable) -> npt.NDArray[np.bool_]:
    """The rows worth ranking under ``fgd`` and ``best-fit``: every node that holds
    something, and of the untouched nodes (no GPU used) of one kind (the same count of
    GPUs of each memory), only those holding, for each memory, the first of the
    highest-capacity GPUs of the best learned-speed step. The rule ranks by that step
    (``speed_key``, when given), then by a node's fragmentation growth, which is the
    same on untouched nodes of one kind for GPUs of one memory, then by sharing, capacity
    and row: the others could never be its first choice. A free fleet of 10,000 GPUs in
    a few kinds of node is ranked as a handful of nodes."""
    n_nodes = table.node_count()
    touched = np.bincount(table.node, weights=table.used_milli, minlength=n_nodes) > 0
    keep = touched[table.node]
    free_rows = np.flatnonzero(~keep)
    if not len(free_rows):
        return keep
    memories, memory = np.unique(table.memory_mib[free_rows], return_inverse=True)
    nodes = table.node[free_rows]
    counts = np.zeros((n_nodes, len(memories)), dtype=np.int64)  # per node: GPUs by memory
    np.add.at(counts, (nodes, memory), 1)
    _, kind_of_node = np.unique(counts, axis=0, return_inverse=True)
    group = kind_of_node.reshape(-1)[nodes] * len(memories) + memory  # (kind, memory)
    if table.speed_key is not None:
        at_best = _at_best_step(table.speed_key[free_rows], group)
        free_rows, nodes, group = free_rows[at_best], nodes[at_best], group[at_best]
    # Best first within a group: the highest capacity, then the first row.
    order = np.lexsort((free_rows, -table.capacity[free_rows], group))
    _, firsts = np.unique(group[order], return_index=True)
    keep[np.isin(table.node, nodes[order[firsts]])] = True
    return keep


def _at_best_step(
    speed_key: npt.NDArray[np.float64], group: npt.NDArray[np.intp]
) -> slice | npt.NDArray[np.bool_]:
    """Which rows hold their group's best (smallest) ``speed_key``: only they can be its
    first. Filtering them costs less than one more key in the sort (+30 %: a float key
    in random order); all of them (one step, the usual case) come back as a slice, so
    nothing is copied."""
    best = np.full(int(group.max()) + 1, np.inf)
    np.minimum.at(best, group, speed_key)
    at_best: npt.NDArray[np.bool_] = speed_key == best[group]
    return slice(None) if at_best.all() else at_best


def _subset(table: RoomTable, keep: npt.NDArray[np.bool_]) -> RoomTable:
    """``table``'s rows where ``keep``, its node codes renumbered from 0."""
    _, nodes = np.unique(table.node[keep], return_inverse=True)
    return RoomTable(
        node=nodes.astype(np.int64),
        used_milli=table.used_milli[keep],
        used_memory_mib=table.used_memory_mib[keep],
        memory_mib=table.memory_mib[keep],
        tenants=table.tenants[keep],
        capacity=table.capacity[keep],
        speed_key=None if table.speed_key is None else table.speed_key[keep],
    )


def _with_share(placement: Placement, milli: int, memory_mib: int, gpu_memory: int) -> Placement:
    """The one-GPU placement's slot with its share and memory, its node with the env."""
    (node,) = placement.nodes
    (slot,) = node.gpus
    shared = slot.model_copy(update={"share": milli / SHARE_SCALE, "memory_mib": memory_mib})
    env = share_env(milli, memory_mib, gpu_memory)
    assignment = node.model_copy(update={"gpus": [shared], "env": env})
    return replace(placement, nodes=(assignment,), shared_gpu_memory_mib=gpu_memory)
