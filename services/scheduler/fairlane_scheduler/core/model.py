"""Core values of a placement (pure, frozen)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from fairlane_events.records import NodeAssignment

__all__ = ["Placement", "PlacementRequest"]


@dataclass(frozen=True)
class PlacementRequest:
    job_id: str
    namespace: str
    gpus_per_node: int
    min_gpu_memory_gib: float | None
    models: frozenset[str] | None
    fingerprint: str  # sha256 of the canonical request body (idempotency)


@dataclass(frozen=True)
class Placement:
    id: str
    job_id: str
    namespace: str
    state: str
    created_at_ms: int
    nodes: tuple[NodeAssignment, ...]
    fingerprint: str
    gpu_scores: Mapping[str, float] = field(default_factory=dict)  # uuid -> score when placed
