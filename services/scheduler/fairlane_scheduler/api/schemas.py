"""HTTP request and response bodies (pydantic at the edge; the core gets frozen values)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Literal

import orjson
from fastapi import Response
from pydantic import AfterValidator, BaseModel, ConfigDict, Field, WithJsonSchema, field_validator

from fairlane_events.gpu_models import CATALOG, find_model
from fairlane_events.json_numbers import AS_INT
from fairlane_events.records import JobClass, NodeAssignment
from fairlane_scheduler.core.placements import Placement, PlacementRequest

__all__ = ["PlacementIn", "PlacementOut", "PlacementPage", "RenewIn", "placement_json"]

# Request bodies accept what their schema says and nothing more: strict types (``false``
# is not 0, ``"3"`` is not 3; an integer still stands for a float, and ``AS_INT`` lets
# ``3.0`` stand for 3, as JSON allows), no unknown fields, no NaN.
_STRICT_BODY = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

Name = Annotated[str, Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]*$")]

#: What a request may name as a GPU model: a catalogue key or its NVML product name. The
#: OpenAPI schema lists them (an enum), so a request valid by the schema is never
#: refused for its model.
GPU_MODEL_NAMES = tuple(sorted({*CATALOG, *(s.nvml_name for s in CATALOG.values())}))


def _known_model(name: str) -> str:
    if name not in GPU_MODEL_NAMES:
        raise ValueError(f"unknown GPU model {name!r}; known: {', '.join(GPU_MODEL_NAMES)}")
    return name


GpuModelName = Annotated[
    str,
    AfterValidator(_known_model),
    WithJsonSchema({"type": "string", "enum": list(GPU_MODEL_NAMES)}),
]


class PlacementIn(BaseModel):
    """A request to place a job. ``job_id`` is the idempotency key within the namespace."""

    model_config = _STRICT_BODY

    job_id: Name
    namespace: Name | None = Field(None, description="default: the token's namespace")
    gpus_per_node: Annotated[int, Field(ge=1, le=64), AS_INT]
    nodes: Annotated[
        int, Field(ge=1, le=1024, description="more than 1: a gang, all or none"), AS_INT
    ] = 1
    min_gpu_memory_gib: Annotated[float, Field(gt=0, le=4096)] | None = None
    models: Annotated[list[GpuModelName], Field(min_length=1, max_length=32)] | None = Field(
        None, description="allowed GPU models: catalogue keys or their NVML product names"
    )
    policy: Literal["fastest", "binpack", "spread"] = "fastest"
    lease_s: Annotated[float, Field(gt=0, le=30 * 24 * 3600)] | None = Field(
        None, description="expire unless renewed within this many seconds; none: never"
    )
    queue: bool = Field(False, description="wait (202, pending) instead of 409/429")
    priority: Annotated[int, Field(ge=-1000, le=1000), AS_INT] = Field(
        0, description="pending requests are placed by priority, then age"
    )
    job_class: JobClass | None = Field(
        None,
        description="the kind of work, as the job reports its progress: placed by score x "
        "the GPUs' learned speeds under it, and told (a degraded event) when one turns slow",
    )

    def canonical_json(self, namespace: str) -> bytes:
        """The body in ``namespace`` (the token's when the body names none), keys sorted;
        without ``job_class`` when it is not given, so a request's fingerprint is the one
        it had before the field existed."""
        body = self.model_dump(mode="json", exclude=None if self.job_class else {"job_class"})
        return orjson.dumps({**body, "namespace": namespace}, option=orjson.OPT_SORT_KEYS)

    def to_core(self, namespace: str) -> PlacementRequest:
        """The core request in ``namespace``, resolved by the caller (``self.namespace``,
        else the token's)."""
        models = None
        if self.models is not None:
            models = frozenset(spec.key for m in self.models if (spec := find_model(m)))
        return PlacementRequest(
            job_id=self.job_id,
            namespace=namespace,
            gpus_per_node=self.gpus_per_node,
            min_gpu_memory_gib=self.min_gpu_memory_gib,
            models=models,
            fingerprint=hashlib.sha256(self.canonical_json(namespace)).hexdigest(),
            lease_s=self.lease_s,
            nodes=self.nodes,
            policy=self.policy,
            queue=self.queue,
            priority=self.priority,
            job_class=self.job_class,
        )


class RenewIn(BaseModel):
    model_config = _STRICT_BODY

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


def placement_json(placement: Placement, status_code: int = 200) -> Response:
    """:class:`PlacementOut` as an answer, serialised straight from the core value: what
    the core built and Postgres stored is not validated once more on the way out."""
    body = {
        "id": placement.id,
        "job_id": placement.job_id,
        "namespace": placement.namespace,
        "state": placement.state,
        "created_at_ms": placement.created_at_ms,
        "lease_expires_at_ms": placement.lease_expires_at_ms,
        "ended_at_ms": placement.ended_at_ms,
        "fallback": placement.fallback,
        "nodes": [n.model_dump(mode="json") for n in placement.nodes],
    }
    return Response(orjson.dumps(body), status_code, media_type="application/json")


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
    model_config = _STRICT_BODY

    max_gpus: Annotated[int, Field(ge=0, le=_MAX_GPUS), AS_INT] | None = Field(
        None, description="none: no limit"
    )
    max_gpus_per_model: dict[GpuModelName, Annotated[int, Field(ge=0, le=_MAX_GPUS), AS_INT]] = (
        Field(default_factory=dict, description="catalogue key (or its NVML name) -> GPUs at once")
    )

    @field_validator("max_gpus_per_model")
    @classmethod
    def _known(cls, value: dict[str, int]) -> dict[str, int]:
        keys = {}
        for name, limit in value.items():
            spec = find_model(name)
            assert spec is not None  # GpuModelName admits catalogue names only
            keys[spec.key] = limit
        return keys


class QuotaOut(QuotaIn):
    namespace: str
    used_gpus: int
    used_by_model: dict[str, int]


class CordonIn(BaseModel):
    model_config = _STRICT_BODY

    reason: Annotated[str, Field(max_length=500, pattern=r"^[^\x00]*$")] = ""
