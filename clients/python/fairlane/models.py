"""The placement API's bodies as the client sees them (pydantic at the edge).

They are the client's own models, not the scheduler's: the client must not import the
scheduler. ``tests/contract/test_client_models.py`` holds them to the scheduler's OpenAPI
schema (field names, required fields, enumerations) so the two cannot drift. A node's
assignment is the wire contract's :class:`~fairlane_events.records.NodeAssignment`, the
very record the scheduler answers with.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from fairlane_events.records import NodeAssignment

__all__ = ["ErrorBody", "NodeAssignment", "Placement", "PlacementRequest", "PlacementState"]

PlacementState = Literal["pending", "placed", "released", "expired", "failed"]


class PlacementRequest(BaseModel):
    """``POST /v1/placements``: ``job_id`` is the idempotency key within the namespace."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    job_id: str
    namespace: str | None = None
    gpus_per_node: int = Field(ge=1)
    nodes: int = Field(1, ge=1, description="more than 1: a gang, all or none")
    min_gpu_memory_gib: float | None = None
    models: list[str] | None = None
    policy: Literal["fastest", "binpack", "spread"] = "fastest"
    lease_s: float | None = Field(None, gt=0)
    queue: bool = False
    priority: int = 0
    job_class: str | None = Field(
        None, description="the kind of work, as the job's progress records name it"
    )
    gpu_share: float | None = Field(
        None, gt=0, le=1, description="a share of one GPU's compute; gpus_per_node and nodes 1"
    )
    gpu_memory_mib: int | None = Field(
        None, ge=1, description="with gpu_share: the GPU memory the share may use"
    )


class Placement(BaseModel):
    """A placement as the scheduler answers it."""

    model_config = ConfigDict(frozen=True, extra="ignore")

    id: str
    job_id: str
    namespace: str
    state: PlacementState
    created_at_ms: int
    lease_expires_at_ms: int | None
    ended_at_ms: int | None
    fallback: bool
    nodes: list[NodeAssignment]


class ErrorBody(BaseModel):
    """Every error answer of the scheduler."""

    model_config = ConfigDict(extra="ignore")

    error: str
    detail: str
    rejections: dict[str, int] | None = None
