"""HTTP request and response bodies (pydantic at the edge; the core gets frozen values)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import orjson
from pydantic import BaseModel, ConfigDict, Field, field_validator

from fairlane_events.gpu_models import CATALOG, find_model
from fairlane_events.records import NodeAssignment
from fairlane_scheduler.core.model import Placement, PlacementRequest

__all__ = ["PlacementIn", "PlacementOut", "PlacementPage", "RenewIn"]

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]


class PlacementIn(BaseModel):
    """A request to place a job. ``job_id`` is the idempotency key within the namespace."""

    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    job_id: Name
    namespace: Name | None = Field(None, description="default: the token's namespace")
    gpus_per_node: Annotated[int, Field(ge=1, le=64)]
    nodes: Annotated[int, Field(ge=1, le=1024, description="more than 1: a gang, all or none")] = 1
    min_gpu_memory_gib: Annotated[float, Field(gt=0, le=4096)] | None = None
    models: Annotated[list[str], Field(min_length=1, max_length=32)] | None = Field(
        None, description=f"allowed GPU models: {', '.join(CATALOG)} (or NVML names)"
    )
    policy: Literal["fastest", "binpack", "spread"] = "fastest"
    lease_s: Annotated[float, Field(gt=0, le=30 * 24 * 3600)] | None = Field(
        None, description="expire unless renewed within this many seconds; none: never"
    )
    queue: bool = Field(False, description="wait (202, pending) instead of 409/429")
    priority: Annotated[int, Field(ge=-1000, le=1000)] = Field(
        0, description="pending requests are placed by priority, then age"
    )

    @field_validator("models")
    @classmethod
    def _known_models(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        unknown = [m for m in value if find_model(m) is None]
        if unknown:
            raise ValueError(f"unknown GPU models {unknown}; known: {', '.join(CATALOG)}")
        return value

    def canonical_json(self) -> bytes:
        return orjson.dumps(self.model_dump(mode="json"), option=orjson.OPT_SORT_KEYS)

    def to_core(self) -> PlacementRequest:
        """The core request; ``namespace`` must be resolved (see ``in_namespace``)."""
        if self.namespace is None:
            raise ValueError("namespace not resolved")
        models = None
        if self.models is not None:
            models = frozenset(spec.key for m in self.models if (spec := find_model(m)))
        return PlacementRequest(
            job_id=self.job_id,
            namespace=self.namespace,
            gpus_per_node=self.gpus_per_node,
            min_gpu_memory_gib=self.min_gpu_memory_gib,
            models=models,
            fingerprint=hashlib.sha256(self.canonical_json()).hexdigest(),
            lease_s=self.lease_s,
            nodes=self.nodes,
            policy=self.policy,
            queue=self.queue,
            priority=self.priority,
        )


class RenewIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    lease_s: Annotated[float, Field(gt=0, le=30 * 24 * 3600)] | None = Field(
        None, description="new lease from now; default: the lease it was placed with"
    )


class PlacementOut(BaseModel):
    id: str
    job_id: str
    namespace: str
    state: Literal["pending", "placed", "released", "expired", "failed"]
    created_at_ms: int
    lease_expires_at_ms: int | None
    ended_at_ms: int | None
    fallback: bool = Field(description="placed below the threshold (best_available policy)")
    nodes: list[NodeAssignment]

    @classmethod
    def of(cls, placement: Placement) -> PlacementOut:
        return cls(
            id=placement.id,
            job_id=placement.job_id,
            namespace=placement.namespace,
            state=placement.state,
            created_at_ms=placement.created_at_ms,
            lease_expires_at_ms=placement.lease_expires_at_ms,
            ended_at_ms=placement.ended_at_ms,
            fallback=placement.fallback,
            nodes=list(placement.nodes),
        )


class PlacementPage(BaseModel):
    items: list[PlacementOut]
    next_before_ms: int | None = Field(description="pass as before_ms for the next page")


class GpuOut(BaseModel):
    uuid: str
    index: int
    model: str
    score: float
    effective_capacity: float
    components: dict[str, float | None]
    ts_ms: int
    state: str = Field(description="free, or why the filter rejects it (cooling, stale...)")
    readmit_at_ms: int | None = Field(description="when a cooling GPU returns if it holds up")


class NodeOut(BaseModel):
    node: str
    gpus: int
    free: int
    mean_score: float
    states: dict[str, int]


class NodeDetailOut(BaseModel):
    node: str
    gpus: list[GpuOut]


_MAX_GPUS = 10_000_000  # far beyond any fleet, well inside Postgres integer


class QuotaIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    max_gpus: Annotated[int, Field(ge=0, le=_MAX_GPUS)] | None = Field(
        None, description="none: no limit"
    )
    max_gpus_per_model: dict[str, Annotated[int, Field(ge=0, le=_MAX_GPUS)]] = Field(
        default_factory=dict, description="catalogue key (or NVML name) -> GPUs at once"
    )

    @field_validator("max_gpus_per_model")
    @classmethod
    def _known(cls, value: dict[str, int]) -> dict[str, int]:
        keys = {}
        for name, limit in value.items():
            spec = find_model(name)
            if spec is None:
                raise ValueError(f"unknown GPU model {name!r}; known: {', '.join(CATALOG)}")
            keys[spec.key] = limit
        return keys


class QuotaOut(QuotaIn):
    namespace: str
    used_gpus: int
    used_by_model: dict[str, int]


class CordonIn(BaseModel):
    model_config = ConfigDict(extra="forbid")

    reason: Annotated[str, Field(max_length=500, pattern=r"^[^\x00]*$")] = ""
