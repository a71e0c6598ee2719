"""Core values of a placement (pure, frozen) and the lifecycle events they produce."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from typing import Any, Literal

import orjson

from fairlane_events.records import NodeAssignment, PlacementEvent
from fairlane_scheduler.core.placement import Policy

__all__ = [
    "EventKind",
    "Placement",
    "PlacementRequest",
    "placement_event",
    "request_from_json",
    "request_to_json",
]

EventKind = Literal["created", "pending", "released", "expired", "failed"]


@dataclass(frozen=True)
class PlacementRequest:
    job_id: str
    namespace: str
    gpus_per_node: int
    min_gpu_memory_gib: float | None
    models: frozenset[str] | None
    fingerprint: str  # sha256 of the canonical request body (idempotency)
    lease_s: float | None = None  # None: the placement never expires
    nodes: int = 1  # more than one: a gang, all nodes or none
    policy: Policy = "fastest"
    queue: bool = False  # wait (pending) instead of failing when nothing fits now
    priority: int = 0  # pending requests are placed by priority, then age


def request_to_json(request: PlacementRequest) -> bytes:
    """What the database keeps of a request, to place it later if it waits."""
    data = asdict(request)
    data["models"] = None if request.models is None else sorted(request.models)
    return orjson.dumps(data)


def request_from_json(raw: str | bytes) -> PlacementRequest:
    data: dict[str, Any] = orjson.loads(raw)
    models = data.get("models")
    return PlacementRequest(**{**data, "models": None if models is None else frozenset(models)})


@dataclass(frozen=True)
class Placement:
    id: str
    job_id: str
    namespace: str
    state: str  # pending | placed | released | expired | failed
    created_at_ms: int
    nodes: tuple[NodeAssignment, ...]
    fingerprint: str
    lease_expires_at_ms: int | None = None
    ended_at_ms: int | None = None
    fallback: bool = False  # placed below the threshold (best_available policy)
    gpu_scores: Mapping[str, float] = field(default_factory=dict)  # uuid -> score when placed
    gpu_models: Mapping[str, str] = field(default_factory=dict)  # uuid -> catalogue key

    @property
    def is_live(self) -> bool:
        return self.state == "placed"

    @property
    def is_open(self) -> bool:
        """Still wanting or holding GPUs: releasing it means something."""
        return self.state in ("pending", "placed")


def placement_event(
    placement: Placement, kind: EventKind, ts_ms: int, reason: str | None = None
) -> PlacementEvent:
    """The record the outbox relay publishes for one lifecycle change."""
    return PlacementEvent(
        placement_id=placement.id,
        job_id=placement.job_id,
        namespace=placement.namespace,
        event=kind,
        ts_ms=ts_ms,
        nodes=list(placement.nodes),
        reason=reason,
    )
