"""Which GPU a fractional request (a share of one GPU) goes to: the packing rule, pure numpy.

Interface
---------
- ``GpuRoom``: one GPU as the rule sees it: ``uuid``, ``node``, ``index``, the share its
  live allocations hold (``used_milli``, thousandths, a whole-GPU tenant holds 1000), the
  memory they hold and the GPU's total (``used_memory_mib``, ``memory_mib``), how many
  fractional tenants it has (``tenants``) and its effective ``capacity`` (health score x
  model speed). The caller has already dropped GPUs that may not be used at all (stale,
  cordoned, wrong model, capacity below the floor); the rest of a node's GPUs stay in,
  because a node's fragmentation depends on all of them.
- ``ShareAsk(milli, memory_mib=None, cpu_milli=0)``: a share of one GPU in thousandths
  (1..1000) and the memory it needs; ``None`` means ``floor(milli x the GPU's memory /
  1000)``. ``cpu_milli`` is the CPUs (milli-cores) the pod takes on its node, all of its
  GPUs together; they count only against a table with a CPU view.
- ``WorkloadMix``: the target workload, weighted ``MixEntry(ask, gpus, weight)``
  shapes, whole-GPU ones (``milli=1000``, ``gpus >= 1``) included. ``DEFAULT_MIX`` is the
  GPU pods of Alibaba's 2023 open trace (``openb_pod_list_default``) by frequency.
- ``RoomTable``: the columnar form of many rooms (numpy arrays, one row per GPU),
  ``RoomTable.of(rooms)``; the simulator builds it straight from its arrays. Optionally a
  CPU view, ``free_cpu_milli``: each node's free CPUs, indexed by node code. The
  scheduler has none (kube-scheduler filters CPUs before Fairlane sees a node); without
  it CPUs count nowhere and every rule ranks as if no shape asked any. Optionally a
  ``speed_key`` per row, ranked before the rule (below).
- ``rank_rooms(table, ask, mix, rule)``: positions (rows) of the GPUs that have room for
  the ask, best first; empty when none has. ``rank_shared_gpus`` does the same on
  ``GpuRoom`` objects. ``fragmentation_by_node(table, mix)`` is the measure itself.

Rules (``SharingRule``)
-----------------------
- ``"fgd"`` (default), Fragmentation Gradient Descent (Weng et al., "Beware of
  Fragmentation", USENIX ATC'23): a node's fragmentation for one task shape ``m`` is the
  free GPU share that ``m`` could not use there: when the node can host ``m`` (at least
  ``m.gpus`` GPUs with room for ``m.ask``), the free share of its GPUs that cannot host
  ``m.ask``; when it cannot, all of its free share. For the mix it is the weighted mean
  over shapes, ``F_n = sum_m w_m F_n(m)``. The ask goes to the GPU whose placement grows
  its node's ``F_n`` least (often a decrease: filling a half-used GPU). With a CPU view,
  as the paper defines it, a node can host ``m`` only if its free CPUs also cover
  ``m.ask.cpu_milli``, and a placement's growth counts the CPUs the ask takes from its
  node; only GPUs on nodes with the ask's CPUs free have room for it.
- ``"best-fit"``: the GPU left with the least free share (then least free memory).
- ``"first-fit"``: the first GPU in the table's order with room.

Ties under ``fgd`` and ``best-fit`` go to a GPU that already has fractional tenants, then
to the higher capacity, then to the earlier row: callers pass rooms in a stable order
(e.g. node, index), so replicas with the same view choose alike.

A table with a ``speed_key`` (the scheduler's: each GPU's learned speed under the share's
job class in rounded steps, core/placement.py ``speed_step``, smaller first) is ranked by
it before any rule: the rule chooses among the GPUs of the best key that have room,
``first-fit`` too. Without one (no class, or nothing learned under it) the rules rank as
above.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

__all__ = [
    "DEFAULT_MIX",
    "SHARING_RULES",
    "WHOLE_MILLI",
    "GpuRoom",
    "MixEntry",
    "RoomTable",
    "ShareAsk",
    "SharingRule",
    "WorkloadMix",
    "fragmentation_by_node",
    "rank_rooms",
    "rank_shared_gpus",
]

SharingRule = Literal["fgd", "best-fit", "first-fit"]
SHARING_RULES: tuple[SharingRule, ...] = ("fgd", "best-fit", "first-fit")
WHOLE_MILLI = 1000
# Deltas are weighted sums of integer thousandths; rounding them keeps float noise from
# breaking ties that are ties.
_DELTA_DECIMALS = 6

Ints = npt.NDArray[np.int64]
Floats = npt.NDArray[np.float64]
Bools = npt.NDArray[np.bool_]


@dataclass(frozen=True, slots=True)
class GpuRoom:
    uuid: str
    node: str
    index: int
    used_milli: int
    used_memory_mib: int
    memory_mib: int
    tenants: int
    capacity: float

    def __post_init__(self) -> None:
        if not 0 <= self.used_milli <= WHOLE_MILLI:
            raise ValueError(f"used_milli must be in 0..{WHOLE_MILLI}, got {self.used_milli}")
        if self.memory_mib < 1 or not 0 <= self.used_memory_mib <= self.memory_mib:
            raise ValueError(
                f"memory must satisfy 0 <= used_memory_mib <= memory_mib, 1 <= memory_mib; "
                f"got {self.used_memory_mib} of {self.memory_mib}"
            )
        if self.tenants < 0 or self.capacity < 0:
            raise ValueError("tenants and capacity must not be negative")


@dataclass(frozen=True, slots=True)
class ShareAsk:
    milli: int
    memory_mib: int | None = None
    cpu_milli: int = 0

    def __post_init__(self) -> None:
        if not 1 <= self.milli <= WHOLE_MILLI:
            raise ValueError(f"milli must be in 1..{WHOLE_MILLI}, got {self.milli}")
        if self.memory_mib is not None and self.memory_mib < 1:
            raise ValueError(f"memory_mib must be at least 1, got {self.memory_mib}")
        if self.cpu_milli < 0:
            raise ValueError(f"cpu_milli must not be negative, got {self.cpu_milli}")

    def memory_on(self, memory_mib: Ints) -> Ints:
        """The memory this ask takes on GPUs with ``memory_mib`` in total."""
        if self.memory_mib is not None:
            return np.full_like(memory_mib, self.memory_mib)
        return (self.milli * memory_mib) // WHOLE_MILLI


@dataclass(frozen=True, slots=True)
class MixEntry:
    ask: ShareAsk
    gpus: int = 1
    weight: float = 1.0

    def __post_init__(self) -> None:
        if self.gpus < 1 or not self.weight > 0:
            raise ValueError(f"gpus must be >= 1 and weight > 0, got {self.gpus}, {self.weight}")
        if self.gpus > 1 and self.ask.milli != WHOLE_MILLI:
            raise ValueError("a multi-GPU shape takes whole GPUs (milli 1000)")


@dataclass(frozen=True, slots=True)
class WorkloadMix:
    entries: tuple[MixEntry, ...]

    def __post_init__(self) -> None:
        if not self.entries:
            raise ValueError("a workload mix needs at least one entry")

    def weights(self) -> Floats:
        """The entries' weights normalised to sum to 1."""
        raw = np.array([entry.weight for entry in self.entries], dtype=np.float64)
        normalised: Floats = raw / raw.sum()
        return normalised


def _trace_mix(counts: Sequence[tuple[int, int, int]]) -> WorkloadMix:
    return WorkloadMix(tuple(MixEntry(ShareAsk(milli), gpus, n) for gpus, milli, n in counts))


# (gpus, milli per GPU, pods) of the GPU pods in Alibaba's cluster-trace-gpu-v2023,
# openb_pod_list_default.csv (CC BY 4.0); the evaluation's tests recount them.
DEFAULT_MIX = _trace_mix(
    (
        (1, 1000, 3911), (1, 810, 1078), (1, 470, 750), (1, 320, 328), (1, 650, 253),
        (1, 230, 140), (1, 460, 128), (1, 590, 75), (1, 160, 74), (1, 550, 72),
        (1, 220, 62), (1, 370, 47), (8, 1000, 44), (1, 110, 24), (1, 480, 19),
        (2, 1000, 16), (4, 1000, 15), (1, 50, 7), (1, 330, 7), (1, 350, 6),
        (1, 270, 4), (1, 440, 2), (1, 140, 1), (1, 290, 1),
    )
)  # fmt: skip


@dataclass(frozen=True, eq=False)
class RoomTable:
    """Many GPUs' rooms as columns; ``node`` holds node codes 0..n_nodes-1.
    ``free_cpu_milli``, when given, holds each node code's free CPUs (the CPU view);
    ``speed_key``, when given, each row's key ranked before the rule's (module doc)."""

    node: Ints
    used_milli: Ints
    used_memory_mib: Ints
    memory_mib: Ints
    tenants: Ints
    capacity: Floats
    free_cpu_milli: Ints | None = None
    speed_key: Floats | None = None

    def __post_init__(self) -> None:
        if self.free_cpu_milli is not None and len(self.free_cpu_milli) < self.node_count():
            raise ValueError(
                f"free_cpu_milli needs a value per node code: {len(self.free_cpu_milli)} "
                f"for {self.node_count()} nodes"
            )

    @classmethod
    def of(cls, rooms: Sequence[GpuRoom]) -> RoomTable:
        codes: dict[str, int] = {}
        return cls(
            node=np.array([codes.setdefault(r.node, len(codes)) for r in rooms], dtype=np.int64),
            used_milli=np.array([r.used_milli for r in rooms], dtype=np.int64),
            used_memory_mib=np.array([r.used_memory_mib for r in rooms], dtype=np.int64),
            memory_mib=np.array([r.memory_mib for r in rooms], dtype=np.int64),
            tenants=np.array([r.tenants for r in rooms], dtype=np.int64),
            capacity=np.array([r.capacity for r in rooms], dtype=np.float64),
        )

    @property
    def free_milli(self) -> Ints:
        return WHOLE_MILLI - self.used_milli

    @property
    def free_memory_mib(self) -> Ints:
        return self.memory_mib - self.used_memory_mib

    def node_count(self) -> int:
        return int(self.node.max()) + 1 if len(self.node) else 0

    def hosts_cpu(self, ask: ShareAsk) -> Bools:
        """Per row: whether its node has the ask's CPUs free (all, without a CPU view)."""
        if self.free_cpu_milli is None:
            return np.ones(len(self.node), dtype=np.bool_)
        hosts: Bools = self.free_cpu_milli[self.node] >= ask.cpu_milli
        return hosts


def _gpu_asks(mix: WorkloadMix) -> tuple[Ints, Ints, Ints]:
    """The mix's distinct per-GPU asks (share, fixed memory or 0) and each shape's among
    them: shapes that differ only in GPU count or CPUs have the same room on a GPU, so
    the ``[gpu, ...]`` arrays stay as narrow as the distinct asks."""
    asks = np.array([(e.ask.milli, e.ask.memory_mib or 0) for e in mix.entries], dtype=np.int64)
    distinct, shape_ask = np.unique(asks, axis=0, return_inverse=True)
    return distinct[:, 0], distinct[:, 1], shape_ask.reshape(-1)


def _has_room(free_milli: Ints, free_memory: Ints, memory_mib: Ints, mix: WorkloadMix) -> Bools:
    """``[gpu, ask]``: whether each GPU has room for each of the mix's distinct per-GPU
    asks (``_gpu_asks``)."""
    milli, fixed, _ = _gpu_asks(mix)
    share_of_gpu = (milli[None, :] * memory_mib[:, None]) // WHOLE_MILLI
    memory = np.where(fixed > 0, fixed[None, :], share_of_gpu)
    return (free_milli[:, None] >= milli[None, :]) & (free_memory[:, None] >= memory)


def _gpus_needed(mix: WorkloadMix) -> Ints:
    return np.array([e.gpus for e in mix.entries], dtype=np.int64)


def _cpu_room(free_cpu_milli: Ints | None, count: int, mix: WorkloadMix) -> Bools:
    """``[node, shape]``: whether each of ``count`` nodes has each shape's CPUs free; all
    true without a CPU view (``None``)."""
    if free_cpu_milli is None:
        return np.ones((count, len(mix.entries)), dtype=np.bool_)
    cpu = np.array([e.ask.cpu_milli for e in mix.entries], dtype=np.int64)
    room: Bools = free_cpu_milli[:count, None] >= cpu[None, :]
    return room


@dataclass(frozen=True, slots=True)
class _NodeTerms:
    """Per node and shape: GPUs with room, free share stranded on the others, whether the
    node's CPUs suffice; per node: all free share. ``F_n(m)`` is ``stranded`` where
    ``fits >= gpus`` and the CPUs suffice, else ``free``."""

    fits: Ints
    stranded: Ints
    cpu_room: Bools
    free: Ints

    def fragmentation(self, gpus: Ints) -> Ints:
        return _node_fragmentation(self.fits, self.cpu_room, self.stranded, self.free, gpus)


def _node_fragmentation(
    fits: Ints, cpu_room: Bools, stranded: Ints, free: Ints, gpus: Ints
) -> Ints:
    hosted = (fits >= gpus[None, :]) & cpu_room
    fragmentation: Ints = np.where(hosted, stranded, free[:, None])
    return fragmentation


def _node_terms(table: RoomTable, room: Bools, mix: WorkloadMix) -> _NodeTerms:
    """The terms from ``room`` (``_has_room`` of every row), widened to the mix's shapes."""
    n_nodes, n_asks = table.node_count(), room.shape[1]
    cell = (table.node[:, None] * n_asks + np.arange(n_asks)[None, :]).ravel()
    shape_ask = _gpu_asks(mix)[2]

    def per_node(values: npt.NDArray[np.generic]) -> Ints:
        sums = np.bincount(cell, weights=values.ravel(), minlength=n_nodes * n_asks)
        return sums.astype(np.int64).reshape(n_nodes, n_asks)[:, shape_ask]

    free = np.bincount(table.node, weights=table.free_milli, minlength=n_nodes)
    return _NodeTerms(
        fits=per_node(room),
        stranded=per_node(np.where(room, 0, table.free_milli[:, None])),
        cpu_room=_cpu_room(table.free_cpu_milli, n_nodes, mix),
        free=free.astype(np.int64),
    )


def fragmentation_by_node(table: RoomTable, mix: WorkloadMix) -> Floats:
    """``F_n = sum_m w_m F_n(m)`` per node, in thousandths of a GPU (see the module's doc)."""
    room = _has_room(table.free_milli, table.free_memory_mib, table.memory_mib, mix)
    terms = _node_terms(table, room, mix)
    return terms.fragmentation(_gpus_needed(mix)).astype(np.float64) @ mix.weights()


def _alike(table: RoomTable, rows: Ints) -> tuple[Ints, Ints]:
    """One representative of each group of ``rows`` alike in node and room (their growth
    is the same: a node's free GPUs, say), and each row's group."""
    columns = [table.node[rows], table.used_milli[rows], table.used_memory_mib[rows]]
    columns.append(table.memory_mib[rows])
    order = np.lexsort(columns[::-1])
    starts = np.ones(len(rows), dtype=np.bool_)
    for column in columns:
        ordered = column[order]
        starts[1:] |= ordered[1:] != ordered[:-1]
    group = np.empty(len(rows), dtype=np.int64)
    group[order] = np.cumsum(starts) - 1
    return rows[order[starts]], group


def _fragmentation_growth(table: RoomTable, ask: ShareAsk, mix: WorkloadMix, rows: Ints) -> Floats:
    """How much each candidate row's placement grows its node's ``F_n``: only that GPU's
    room (and its node's CPUs) change, so the node's terms move by the difference."""
    rows, group = _alike(table, rows)
    free_milli, free_memory = table.free_milli, table.free_memory_mib
    room = _has_room(free_milli, free_memory, table.memory_mib, mix)
    terms = _node_terms(table, room, mix)
    gpus = _gpus_needed(mix)
    after_milli = free_milli[rows] - ask.milli
    after_memory = free_memory[rows] - ask.memory_on(table.memory_mib[rows])
    room_after = _has_room(after_milli, after_memory, table.memory_mib[rows], mix)
    nodes, shape_ask = table.node[rows], _gpu_asks(mix)[2]
    before = terms.fragmentation(gpus)[nodes]
    fits = terms.fits[nodes] + (room_after.astype(np.int64) - room[rows])[:, shape_ask]
    stranded_change = np.where(room_after, 0, after_milli[:, None]) - np.where(
        room[rows], 0, free_milli[rows, None]
    )
    stranded = terms.stranded[nodes] + stranded_change[:, shape_ask]
    free = terms.free[nodes] - ask.milli
    cpus = table.free_cpu_milli
    cpu_after = None if cpus is None else cpus[nodes] - ask.cpu_milli
    after = _node_fragmentation(fits, _cpu_room(cpu_after, len(rows), mix), stranded, free, gpus)
    growth: Floats = (after - before).astype(np.float64) @ mix.weights()
    return np.round(growth, _DELTA_DECIMALS)[group]


def rank_rooms(
    table: RoomTable, ask: ShareAsk, mix: WorkloadMix = DEFAULT_MIX, rule: SharingRule = "fgd"
) -> npt.NDArray[np.intp]:
    """Rows of ``table`` with room for ``ask``, best first under ``rule`` (module doc)."""
    if rule not in SHARING_RULES:
        raise ValueError(f"rule must be one of {SHARING_RULES}, got {rule!r}")
    need_memory = ask.memory_on(table.memory_mib)
    rows = np.flatnonzero(
        (table.free_milli >= ask.milli)
        & (table.free_memory_mib >= need_memory)
        & table.hosts_cpu(ask)
    ).astype(np.int64)
    speed = () if table.speed_key is None else (table.speed_key[rows],)
    if len(rows) == 0 or (rule == "first-fit" and not speed):
        return rows.astype(np.intp)
    keys: tuple[npt.NDArray[np.generic], ...]
    if rule == "first-fit":
        keys = (*speed, rows)
    else:
        if rule == "fgd":
            primary: tuple[npt.NDArray[np.generic], ...] = (
                _fragmentation_growth(table, ask, mix, rows),
            )
        else:
            left_milli = table.free_milli[rows] - ask.milli
            primary = (left_milli, table.free_memory_mib[rows] - need_memory[rows])
        unshared = table.tenants[rows] == 0
        keys = (*speed, *primary, unshared, -table.capacity[rows], rows)
    ranked: npt.NDArray[np.intp] = rows[np.lexsort(keys[::-1])].astype(np.intp)
    return ranked


def rank_shared_gpus(
    rooms: Sequence[GpuRoom],
    ask: ShareAsk,
    mix: WorkloadMix = DEFAULT_MIX,
    rule: SharingRule = "fgd",
) -> tuple[GpuRoom, ...]:
    """``rank_rooms`` on room objects: the rooms with room for ``ask``, best first."""
    return tuple(rooms[int(row)] for row in rank_rooms(RoomTable.of(rooms), ask, mix, rule))
