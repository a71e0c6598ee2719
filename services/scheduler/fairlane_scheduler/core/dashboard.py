"""What the fleet dashboard shows, and what changed since the last frame (pure).

A *frame* is the fleet as the page draws it: per node, one cell per GPU with its score,
the state the placement filter gives it (``core.nodes``, the API's own answer) and the
component breakdown. Frames are compared node by node, so a browser that has the last
frame receives only the rows that changed. Values are rounded to what the page shows and
the sample time is left out of a cell, so a GPU whose score did not visibly move costs
nothing on the wire, however often its samples arrive.

A GPU that fractional placements share (issue 29) is told by its cell's ``sh``: the
share its tenants hold together, how many they are, and their memory of the GPU's, read
from the placement service's in-memory ledger (the view the share decisions take), not
from Postgres.
"""

from __future__ import annotations

from array import array
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from fairlane_events.records import GpuScore, GpuSpeed
from fairlane_scheduler.core.fleet import FleetView, ScorePoint
from fairlane_scheduler.core.nodes import GpuState
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.core.share_decision import gpu_memory_mib
from fairlane_scheduler.core.shares import SHARE_SCALE, GpuUse

__all__ = [
    "Frame",
    "ScoreHistory",
    "SharedGpus",
    "cell",
    "diff_frames",
    "display_state",
    "placement_row",
    "rows_of",
]

Cell = dict[str, Any]
Rows = dict[str, list[Cell]]  # node -> its GPUs' cells, by index

_FILTER_STATES = {"score below threshold": "below threshold"}


class SharedGpus(Protocol):
    """The GPUs fractional placements share and what each one's tenants hold (the
    placement service's :class:`~fairlane_scheduler.core.ledger.Ledger`)."""

    @property
    def shared_gpus(self) -> Collection[str]: ...

    def shares(self, uuid: str) -> GpuUse: ...


def display_state(gpu: GpuState) -> str:
    """The filter's state, except that a GPU whose health gate is shut (uncorrected ECC
    errors, pending row remaps, lost) says so: that, not its low score, is why."""
    gate = gpu.components.get("health_gate")
    if gate is not None and gate <= 0 and gpu.state in ("score below threshold", "cooling"):
        return "health-gated"
    return _FILTER_STATES.get(gpu.state, gpu.state)


def cell(
    gpu: GpuState,
    speeds: Mapping[str, GpuSpeed] | None = None,
    shared: tuple[GpuUse, int] | None = None,
) -> Cell:
    """One GPU as the page draws it (short keys: 8,000 of these make the first frame);
    ``speeds``: its learned speeds by job class, as ``ls``: class -> [speed, reports,
    confidence] (absent when nothing is learned, as on most GPUs); ``shared``: what its
    fractional tenants hold and the GPU's memory in MiB, as ``sh``: [share, tenants,
    memory MiB, GPU memory MiB] (absent on a GPU no share is on)."""
    drawn = {
        "u": gpu.uuid,
        "i": gpu.index,
        "m": gpu.model,
        "s": round(gpu.score, 3),
        "e": round(gpu.effective_capacity, 2),
        "st": display_state(gpu),
        "r": gpu.readmit_at_ms,
        "c": {k: None if v is None else round(v, 3) for k, v in sorted(gpu.components.items())},
    }
    if speeds:
        drawn["ls"] = {
            job_class: [round(s.speed, 3), s.reports, round(s.confidence, 2)]
            for job_class, s in sorted(speeds.items())
        }
    if shared is not None:
        use, gpu_memory = shared
        drawn["sh"] = [use.milli / SHARE_SCALE, use.tenants, use.memory_mib, gpu_memory]
    return drawn


def rows_of(
    fleet: FleetView, states: Mapping[str, Sequence[GpuState]], shares: SharedGpus | None = None
) -> Rows:
    """Every node's cells, from the filter's states of its GPUs, the fleet's learned
    speeds and what fractional placements hold of the GPUs they share (``shares``)."""
    learned = fleet.speed_records
    shared = {} if shares is None else _shared_cells(fleet, shares)
    return {
        node: [cell(g, learned.get(g.uuid), shared.get(g.uuid)) for g in gpus]
        for node, gpus in states.items()
    }


def _shared_cells(fleet: FleetView, shares: SharedGpus) -> dict[str, tuple[GpuUse, int]]:
    """Each shared GPU of the fleet: its tenants' use and its memory (only the shared
    GPUs are looked at, not the whole fleet)."""
    uuids = [u for u in shares.shared_gpus if u in fleet.row]
    memory = gpu_memory_mib(fleet, fleet.rows_of(uuids)).tolist()
    return {u: (shares.shares(u), int(m)) for u, m in zip(uuids, memory, strict=True)}


def placement_row(placement: Placement, *, idle: bool = False) -> dict[str, Any]:
    """A placement as the page lists it; ``idle``: in an announced idle episode (its
    GPUs all near-idle for the idle window, core/idle.py). A fractional placement's
    ``share`` and ``memory_mib`` are its one GPU's slot's (null for whole GPUs)."""
    slots = [g for n in placement.nodes for g in n.gpus]
    fractional = slots[0] if slots and slots[0].share is not None else None
    return {
        "id": placement.id,
        "job": placement.job_id,
        "ns": placement.namespace,
        "state": placement.state,
        "created_ms": placement.created_at_ms,
        "lease_ms": placement.lease_expires_at_ms,
        "gpus": sum(len(n.gpus) for n in placement.nodes),
        "nodes": {n.node: [g.uuid for g in n.gpus] for n in placement.nodes},
        "idle": idle,
        "share": None if fractional is None else fractional.share,
        "memory_mib": None if fractional is None else fractional.memory_mib,
    }


@dataclass(frozen=True)
class Frame:
    """The whole picture at one instant; ``seq`` grows by one per frame."""

    seq: int
    ts_ms: int
    rows: Rows
    placements: Sequence[Placement] = ()
    pending: Sequence[Placement] = ()
    counters: Mapping[str, int] = field(default_factory=dict)
    idle: frozenset[str] = frozenset()  # ids of the placements in an idle episode


def diff_frames(old: Rows | None, new: Rows) -> tuple[Rows, list[str]]:
    """The rows of ``new`` that differ from ``old`` (all of them without one), and the
    nodes that ``old`` had and ``new`` has not."""
    if old is None:
        return dict(new), []
    changed = {node: cells for node, cells in new.items() if old.get(node) != cells}
    return changed, sorted(old.keys() - new.keys())


class ScoreHistory:
    """The last ``points`` scores of every GPU, one per score record seen (records are
    emitted when the score moves or at the heartbeat, so this is the score's shape).

    Each GPU's series is one flat ``array('d')`` of (ts_ms, score) pairs, trimmed to
    ``points`` once it holds twice that: about 16 bytes a point and one object per GPU,
    where a deque of tuples took ~110 bytes a point and ~600 bytes a GPU (76 MiB for
    100,000 GPUs of one point each)."""

    def __init__(self, points: int = 120) -> None:
        self._points = points
        self._series: dict[str, array[float]] = {}

    def observe(self, records: Iterable[GpuScore | ScorePoint]) -> None:
        for record in records:
            series = self._series.get(record.uuid)
            if series is None:
                series = self._series[record.uuid] = array("d")
            elif series[-2] >= record.ts_ms:
                continue
            series.extend((record.ts_ms, record.score))
            if len(series) >= 4 * self._points:
                del series[: len(series) - 2 * self._points]

    def of(self, uuid: str) -> list[tuple[int, float]] | None:
        series = self._series.get(uuid)
        if series is None:
            return None
        recent = series[-2 * self._points :]
        return [(int(recent[i]), recent[i + 1]) for i in range(0, len(recent), 2)]
