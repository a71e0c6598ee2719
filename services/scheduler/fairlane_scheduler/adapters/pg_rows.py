"""Between placements and Postgres rows (asyncpg): the core values from the rows the
store reads, and the arguments of the write functions (migration 0007) from the core
values; what a write function answered, as a :class:`~fairlane_scheduler.storage.WriteOutcome`."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson

from fairlane_events.codec import encode
from fairlane_events.records import GpuSlot, NodeAssignment
from fairlane_scheduler import storage
from fairlane_scheduler.core.placements import (
    EventKind,
    Placement,
    placement_event,
    with_master_port,
)
from fairlane_scheduler.core.quota import Quota
from fairlane_scheduler.core.shares import slot_milli

__all__ = [
    "lease_of",
    "ms_of",
    "outcome_of",
    "placement_of",
    "quota_of",
    "share_args",
    "utc",
    "write_args",
]


def utc(ms: int) -> datetime:
    """Exact to the millisecond (a float division would not be)."""
    return datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)


def ms_of(value: datetime | None) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)


def placement_of(row: asyncpg.Record) -> Placement:
    return Placement(
        id=str(row["id"]),
        job_id=row["job_id"],
        namespace=row["namespace"],
        state=row["state"],
        created_at_ms=round(row["created_at"].timestamp() * 1000),
        nodes=tuple(NodeAssignment.model_validate(n) for n in orjson.loads(row["assignment"])),
        fingerprint=row["request_sha256"],
        lease_expires_at_ms=ms_of(row["lease_expires_at"]),
        ended_at_ms=ms_of(row["ended_at"]),
        fallback=row["fallback"],
    )


def quota_of(row: Any) -> Quota:
    per_model = row["max_gpus_per_model"]
    return Quota(
        row["max_gpus"], orjson.loads(per_model) if isinstance(per_model, str) else per_model
    )


def _why(placement: Placement) -> str | None:
    return "placed below the capacity threshold (best_available)" if placement.fallback else None


def lease_of(placement: Placement) -> datetime | None:
    ms = placement.lease_expires_at_ms
    return None if ms is None else utc(ms)


def write_args(placement: Placement, kind: EventKind, ts_ms: int) -> list[Any]:
    """The arguments every write function takes after the placement's own: master node,
    proposed port, assignment, event, and one array per allocation column, by node and
    GPU id: the order a set-based batch takes them in (0012), so that a placement written
    alone and a batch never each hold a GPU the other waits for."""
    master = placement.nodes[0] if placement.nodes else None
    gpus = sorted(((n.node, g) for n in placement.nodes for g in n.gpus), key=_node_and_id)
    event = placement_event(placement, kind, ts_ms, _why(placement))
    return [
        None if master is None else master.master_addr,
        None if master is None else master.master_port,
        orjson.dumps([n.model_dump(mode="json") for n in placement.nodes]).decode(),
        encode(event).decode(),
        [g.uuid for _, g in gpus],
        [node for node, _ in gpus],
        [g.index for _, g in gpus],
        [placement.gpu_scores[g.uuid] for _, g in gpus],
        [placement.gpu_models.get(g.uuid, "") for _, g in gpus],
    ]


def share_args(placement: Placement) -> list[Any]:
    """A fractional placement's one allocation, as fairlane_place_share and
    fairlane_promote_share take it (migration 0015): GPU, node, index, score, model,
    share in thousandths, its memory and the GPU's whole memory."""
    ((node, slot),) = [(n.node, g) for n in placement.nodes for g in n.gpus]
    assert slot.share is not None
    return [
        slot.uuid,
        node,
        slot.index,
        placement.gpu_scores[slot.uuid],
        placement.gpu_models.get(slot.uuid, ""),
        slot_milli(slot),
        slot.memory_mib,
        placement.shared_gpu_memory_mib,
    ]


def _node_and_id(gpu: tuple[str, GpuSlot]) -> tuple[str, str]:
    return gpu[0], gpu[1].uuid


def outcome_of(row: Mapping[str, Any], placement: Placement) -> storage.WriteOutcome:
    outcome = row["outcome"]
    if outcome == "created":  # the database may have given another free port
        return storage.Written(with_master_port(placement, row["port"]))
    if outcome == "pending":
        return storage.Written(placement)
    if (unwritten := _UNWRITTEN.get(outcome)) is not None:
        return unwritten
    detail = orjson.loads(row["detail"])
    return storage.OverQuota(quota_of(detail), detail["used"])


_UNWRITTEN: dict[str, storage.WriteOutcome] = {
    "exists": storage.JobTaken(),
    "gone": storage.NotPending(),
    "no_port": storage.NoFreePort(),
}
