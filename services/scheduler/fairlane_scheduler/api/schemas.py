"""HTTP request and response bodies (pydantic at the edge; the core gets frozen values)."""

from __future__ import annotations

import hashlib
from typing import Annotated, Any, Literal

import orjson
from fastapi import Response
from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    WithJsonSchema,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError, ValidationError

from fairlane_events.gpu_models import CATALOG, find_model
from fairlane_events.json_numbers import AS_INT
from fairlane_events.records import JobClass, NodeAssignment
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.core.shares import SHARE_SCALE

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
        # Not the name itself: an error never echoes what was sent (docs/security.md).
        raise ValueError(f"unknown GPU model; known: {', '.join(GPU_MODEL_NAMES)}")
    return name


GpuModelName = Annotated[
    str,
    AfterValidator(_known_model),
    WithJsonSchema({"type": "string", "enum": list(GPU_MODEL_NAMES)}),
]


def _memory_mib(model_key: str) -> int:
    return round(CATALOG[model_key].mem_gib * 1024)


def _fractional_rules(schema: dict[str, Any]) -> None:
    """The request's cross-field rules (:meth:`PlacementIn._fractional_fits`) in its JSON
    Schema, so that a request valid by the schema is never refused: ``gpu_share`` wants
    one GPU on one node, ``gpu_memory_mib`` wants ``gpu_share``, and with ``models``
    every memory tier caps ``gpu_memory_mib`` at the largest allowed GPU's memory."""
    given = {"not": {"type": "null"}}
    rules: list[dict[str, Any]] = [
        {
            "if": {"properties": {"gpu_share": given}, "required": ["gpu_share"]},
            "then": {"properties": {"gpus_per_node": {"const": 1}, "nodes": {"const": 1}}},
        },
        {
            "if": {"properties": {"gpu_memory_mib": given}, "required": ["gpu_memory_mib"]},
            "then": {"properties": {"gpu_share": given}, "required": ["gpu_share"]},
        },
    ]
    tiers = sorted({_memory_mib(key) for key in CATALOG})
    for tier in tiers[:-1]:  # the largest tier is the field's own maximum
        names = sorted(
            n for s in CATALOG.values() if _memory_mib(s.key) <= tier for n in (s.key, s.nvml_name)
        )
        models_within = {"type": "array", "items": {"enum": names}}
        memory = {"anyOf": [{"type": "integer", "maximum": tier}, {"type": "null"}]}
        rules.append(
            {
                "if": {"properties": {"models": models_within}, "required": ["models"]},
                "then": {"properties": {"gpu_memory_mib": memory}},
            }
        )
    schema["allOf"] = rules


#: No request may ask a share more memory than the catalogue's largest GPU has.
_LARGEST_GPU_MIB = max(_memory_mib(key) for key in CATALOG)


class PlacementIn(BaseModel):
    """A request to place a job. ``job_id`` is the idempotency key within the namespace."""

    model_config = ConfigDict(**_STRICT_BODY, json_schema_extra=_fractional_rules)

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
    gpu_share: Annotated[float, Field(ge=1 / SHARE_SCALE, le=1)] | None = Field(
        None,
        description="a share of ONE GPU's compute (0 < share <= 1, in thousandths): the job "
        "shares the GPU with others; needs gpus_per_node 1 and nodes 1",
    )
    gpu_memory_mib: Annotated[int, Field(ge=1, le=_LARGEST_GPU_MIB), AS_INT] | None = Field(
        None,
        description="with gpu_share: the GPU memory the job may use; default: the share of "
        "the chosen GPU's memory",
    )

    @model_validator(mode="after")
    def _fractional_fits(self) -> PlacementIn:
        """A fractional request takes one share of one GPU, on a model with that memory."""
        if self.gpu_share is None:
            if self.gpu_memory_mib is not None:
                _refuse("gpu_share", "gpu_memory_mib is a share's memory: give gpu_share too")
            return self
        for field in ("gpus_per_node", "nodes"):
            if getattr(self, field) != 1:
                _refuse(field, f"a fractional request (gpu_share) takes one GPU: {field} must be 1")
        if self.gpu_memory_mib is not None:
            largest = max(_memory_mib(key) for key in self._model_keys() or CATALOG)
            if self.gpu_memory_mib > largest:
                _refuse(
                    "gpu_memory_mib",
                    f"gpu_memory_mib {self.gpu_memory_mib} exceeds the largest allowed GPU's "
                    f"memory ({largest} MiB)",
                )
        return self

    def _model_keys(self) -> frozenset[str] | None:
        if self.models is None:
            return None
        return frozenset(spec.key for m in self.models if (spec := find_model(m)))

    def canonical_json(self, namespace: str) -> bytes:
        """The body in ``namespace`` (the token's when the body names none), keys sorted;
        without the fields added later (``job_class``, ``gpu_share``, ``gpu_memory_mib``)
        when they are not given, so a request's fingerprint is the one it had before they
        existed."""
        unset = {f for f in _ADDED_FIELDS if getattr(self, f) is None}
        body = self.model_dump(mode="json", exclude=unset)
        return orjson.dumps({**body, "namespace": namespace}, option=orjson.OPT_SORT_KEYS)

    def to_core(self, namespace: str) -> PlacementRequest:
        """The core request in ``namespace``, resolved by the caller (``self.namespace``,
        else the token's)."""
        return PlacementRequest(
            job_id=self.job_id,
            namespace=namespace,
            gpus_per_node=self.gpus_per_node,
            min_gpu_memory_gib=self.min_gpu_memory_gib,
            models=self._model_keys(),
            fingerprint=hashlib.sha256(self.canonical_json(namespace)).hexdigest(),
            lease_s=self.lease_s,
            nodes=self.nodes,
            policy=self.policy,
            queue=self.queue,
            priority=self.priority,
            job_class=self.job_class,
            gpu_share=self.gpu_share,
            gpu_memory_mib=self.gpu_memory_mib,
        )


#: Request fields added after the first release: left out of the fingerprint when unset.
_ADDED_FIELDS = ("job_class", "gpu_share", "gpu_memory_mib")


def _refuse(field: str, message: str) -> None:
    """A 422 whose error names ``field`` (its ``loc``), as a field's own validation does."""
    error = PydanticCustomError("fractional_request", message)
    raise ValidationError.from_exception_data(
        "PlacementIn", [InitErrorDetails(type=error, loc=(field,), input=None)]
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
    used_gpus: float = Field(description="GPUs held; a fractional placement holds its share")
    used_by_model: dict[str, float]


class CordonIn(BaseModel):
    model_config = _STRICT_BODY

    reason: Annotated[str, Field(max_length=500, pattern=r"^[^\x00]*$")] = ""
