"""kube-scheduler extender decisions for a pod that asks for a share of one GPU (pure).

A GPU can take the share when it qualifies for the pod as for a whole one
(core/extender.py: fresh, of an allowed model and size, at or above the threshold, not
cooling, not cordoned) and its live shares plus the pod's stay within one GPU
(1000 thousandths) and its memory. Live shares are Fairlane's placements (the ledger
Postgres feeds, any replica's) and pods in flight here (``use``); a GPU a whole
placement holds has nothing free, and so have as many of a node's unshared GPUs as
whole-GPU Kubernetes pods hold there (``whole_pods``: the device plugin may have given
them any; the best ones are assumed taken, as for whole pods).

Among the GPUs with room, the packing rule of core/sharing.py (FGD by default: a GPU
already shared first, then the one that keeps the most usable remainder) ranks them;
each node offers its best GPU, and the nodes rank by where that GPU stands (priority
10 for the node of the rule's first choice). A node whose GPUs could never take the
share (none of an allowed model and size, or none with that much memory) is
unresolvable; one whose GPUs are merely full, held or unhealthy has failed for now, and
its reason says how much its best GPU has left.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fairlane_scheduler.core.extender import gpu_states
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.ledger import Ledger
from fairlane_scheduler.core.node_states import FREE, STATIC
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.pod import PodShare
from fairlane_scheduler.core.share_decision import gpu_memory_mib
from fairlane_scheduler.core.shares import SHARE_SCALE, GpuUse
from fairlane_scheduler.core.sharing import (
    DEFAULT_MIX,
    RoomTable,
    ShareAsk,
    SharingRule,
    WorkloadMix,
    rank_rooms,
)
from fairlane_scheduler.core.verdicts import Verdicts

__all__ = [
    "ShareVerdicts",
    "judge_share_nodes",
    "placed_shares",
    "shared_free_per_node",
]

_NO_SCORES = "no GPU scores from Fairlane for this node"


@dataclass(frozen=True)
class ShareVerdicts:
    """Every candidate's verdict, and on each node that passes the GPU the rule chooses
    there with the memory the share takes on it (MiB)."""

    verdicts: Verdicts
    gpus: Mapping[str, tuple[str, int]]


def placed_shares(ledger: Ledger) -> dict[str, GpuUse]:
    """What the placements on each shared GPU hold (by uuid)."""
    return {gpu: ledger.shares(gpu) for gpu in ledger.shared_gpus}


def shared_free_per_node(fleet: FleetView, shared: Mapping[str, GpuUse]) -> dict[str, int]:
    """Per node name, the thousandths its shared GPUs have left (``shared``: what the
    placements on each shared GPU hold)."""
    free: dict[str, int] = {}
    for uuid, use in shared.items():
        if (row := fleet.row.get(uuid)) is not None:
            node = fleet.nodes[int(fleet.node[row])]
            free[node] = free.get(node, 0) + max(SHARE_SCALE - use.milli, 0)
    return free


def judge_share_nodes(
    fleet: FleetView,
    summaries: NodeSummaries,
    *,
    pod: PodShare,
    policy: PlacementPolicy,
    use: Mapping[str, GpuUse],
    whole_pods: npt.NDArray[np.int64] | None,
    now_ms: int,
    node_names: Sequence[str],
    rule: SharingRule = "fgd",
    mix: WorkloadMix = DEFAULT_MIX,
) -> ShareVerdicts:
    """``use``: live shares per GPU uuid; ``whole_pods``: GPUs whole Kubernetes pods hold,
    per fleet node id (core/pod_ledger.py)."""
    summaries.refresh(fleet, policy, now_ms)
    at = summaries.node_ids(node_names)
    known = np.flatnonzero(at != summaries.unknown)
    state, rows = gpu_states(
        fleet, summaries, policy, pod.shape, at[known], now_ms=now_ms, holds=False
    )
    codes, slots = np.nonzero(rows >= 0)  # candidate (of the known) and slot of each GPU
    gpu_rows = rows[codes, slots]
    memory = gpu_memory_mib(fleet, gpu_rows)
    used_milli, used_memory, tenants = _used(fleet, gpu_rows, memory, use)
    allowed = (state[codes, slots] != STATIC) & (memory > 0)  # unknown size: never shared
    ok = allowed & (state[codes, slots] == FREE)
    if whole_pods is not None:
        taken = _taken_by_whole_pods(
            fleet, gpu_rows, codes, ok & (used_milli == 0), whole_pods[at[known]]
        )
        used_milli, used_memory = (
            np.where(taken, SHARE_SCALE, used_milli),
            np.where(taken, memory, used_memory),
        )
    ask = ShareAsk(pod.milli, pod.memory_mib)
    table = RoomTable(
        node=codes[ok].astype(np.int64),
        used_milli=np.clip(used_milli[ok], 0, SHARE_SCALE),
        used_memory_mib=np.minimum(used_memory[ok], memory[ok]),
        memory_mib=memory[ok],
        tenants=tenants[ok],
        capacity=fleet.capacity[gpu_rows[ok]],
    )
    ranked = rank_rooms(table, ask, mix, rule)
    chosen_codes, first = np.unique(table.node[ranked], return_index=True)
    order = np.argsort(first)  # the nodes in the order of their best GPU's rank
    fits = np.zeros(len(at), dtype=bool)
    goodness = np.zeros(len(at))
    gpus: dict[str, tuple[str, int]] = {}
    ok_rows, ok_memory = gpu_rows[ok], memory[ok]
    for position, i in enumerate(order.tolist()):
        candidate = int(known[chosen_codes[i]])
        row = int(ranked[first[i]])
        fits[candidate] = True
        goodness[candidate] = len(order) - position
        need = ask.memory_on(ok_memory[row : row + 1])
        gpus[node_names[candidate]] = (fleet.uuids[ok_rows[row]], int(need[0]))
    can_ever = np.zeros(len(at), dtype=bool)
    need_all = ask.memory_on(memory)
    np.logical_or.at(can_ever, known[codes], allowed & (need_all <= memory))
    unresolvable = ~fits & ~can_ever
    verdicts = Verdicts(
        node_names, fits, unresolvable, goodness, np.where(at != summaries.unknown, at, -1)
    )
    bad = np.flatnonzero(~fits)
    if len(bad):
        verdicts.explain(
            bad,
            _reasons(
                bad,
                at=at,
                known=known,
                codes=codes,
                table=table,
                ask=ask,
                ok=ok,
                largest=np.where(allowed, memory, 0),
            ),
        )
    return ShareVerdicts(verdicts, gpus)


def _used(
    fleet: FleetView,
    rows: npt.NDArray[np.intp],
    memory: npt.NDArray[np.int64],
    use: Mapping[str, GpuUse],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per GPU: the share, memory and fractional tenants live shares hold; a GPU a whole
    placement holds (held, without shares) is full."""
    found = [use.get(fleet.uuids[r]) for r in rows.tolist()]
    milli = np.array([0 if u is None else u.milli for u in found], dtype=np.int64)
    mib = np.array([0 if u is None else u.memory_mib for u in found], dtype=np.int64)
    tenants = np.array([0 if u is None else u.tenants for u in found], dtype=np.int64)
    whole = fleet.held[rows] & (tenants == 0)
    return np.where(whole, SHARE_SCALE, milli), np.where(whole, memory, mib), tenants


def _taken_by_whole_pods(
    fleet: FleetView,
    rows: npt.NDArray[np.intp],
    codes: npt.NDArray[np.intp],
    unshared: npt.NDArray[np.bool_],
    pods: npt.NDArray[np.int64],
) -> npt.NDArray[np.bool_]:
    """The unshared qualifying GPUs whole pods are assumed to hold: on each node, as many
    as they hold there, the highest-capacity first."""
    order = np.lexsort((-fleet.capacity[rows], ~unshared, codes))
    taken = np.zeros(len(rows), dtype=bool)
    starts = np.searchsorted(codes[order], np.arange(len(pods)))
    rank = np.arange(len(order)) - starts[codes[order]]
    taken[order] = unshared[order] & (rank < pods[codes[order]])
    return taken


def _reasons(
    bad: npt.NDArray[np.intp],
    *,
    at: npt.NDArray[np.intp],
    known: npt.NDArray[np.intp],
    codes: npt.NDArray[np.intp],
    table: RoomTable,
    ask: ShareAsk,
    ok: npt.NDArray[np.bool_],
    largest: npt.NDArray[np.int64],
) -> list[str]:
    """Each failing candidate's reason: the qualifying GPU with the most share free and
    what it has left, its GPUs held whole, and how many allowed GPUs do not qualify now;
    or that none of its GPUs is allowed (``largest``: each GPU's memory, 0 when it is
    not of an allowed model and size) or has the memory."""
    position = np.full(len(at), -1)
    position[known] = np.arange(len(known))
    n = len(known)
    most = np.lexsort((table.free_memory_mib, table.free_milli, table.node))
    last = np.r_[table.node[most][1:] != table.node[most][:-1], True]
    best = np.full((n, 2), -1, dtype=np.int64)
    best[table.node[most][last]] = np.column_stack(
        (table.free_milli[most][last], table.free_memory_mib[most][last])
    )
    whole = np.bincount(
        table.node[(table.used_milli >= SHARE_SCALE) & (table.tenants == 0)], minlength=n
    )
    allowed = largest > 0
    unhealthy = np.bincount(codes[allowed & ~ok], minlength=n)
    usable = np.zeros(n, dtype=np.int64)
    np.maximum.at(usable, codes, largest)
    texts = []
    for i in bad.tolist():
        if (p := int(position[i])) < 0:
            texts.append(_NO_SCORES)
            continue
        counts = (int(usable[p]), int(whole[p]), int(unhealthy[p]))
        texts.append(_reason((ask.milli, ask.memory_mib), (*best[p].tolist(), *counts)))
    return texts


@functools.lru_cache(maxsize=4096)  # the same states come back call after call
def _reason(ask: tuple[int, int | None], node: tuple[int, ...]) -> str:
    """``ask``: (thousandths, MiB or None); ``node``: its best GPU's free thousandths and
    MiB (-1: no qualifying GPU), the memory of its largest allowed GPU (0: none), its
    GPUs held whole, those not qualifying."""
    (milli, memory_mib), (best, best_memory, largest, whole, unhealthy) = ask, node
    if largest == 0:
        return "no GPU of an allowed model and size"
    if memory_mib is not None and memory_mib > largest:
        return f"no GPU with {memory_mib} MiB of memory (the largest here: {largest} MiB)"
    wanted = f"{milli}/{SHARE_SCALE}" + ("" if memory_mib is None else f" and {memory_mib} MiB")
    parts = []
    if best >= 0:
        parts.append(f"most free on one GPU: {best}/{SHARE_SCALE} and {best_memory} MiB")
    if whole:
        parts.append(f"{whole} held whole")
    if unhealthy:
        parts.append(f"{unhealthy} not qualifying now")
    return f"no GPU with {wanted} free ({', '.join(parts)})"
