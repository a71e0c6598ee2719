"""The records on every Fairlane topic, as typed models (the wire contract).

Every record carries ``schema = "<name>/<major>"`` and integer epoch milliseconds.
A metric a GPU does not support is ``None`` (absent), never 0. Non-finite numbers are
rejected: they cannot be represented in JSON and would poison every score downstream.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

__all__ = [
    "DeadLetter",
    "GpuSample",
    "GpuScore",
    "GpuSlot",
    "NodeAssignment",
    "NodeSample",
    "PlacementEvent",
    "Record",
]

NodeName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._-]+$")]
GpuUuid = Annotated[str, Field(min_length=1, max_length=96)]
EpochMs = Annotated[int, Field(gt=0, lt=10**14)]
Percent = Annotated[float, Field(ge=0, le=100)]
Fraction = Annotated[float, Field(ge=0, le=1)]
Bytes = Annotated[int, Field(ge=0, le=2**50)]
Celsius = Annotated[float, Field(ge=-50, le=250)]
Watts = Annotated[float, Field(ge=0, le=5000)]
MHz = Annotated[float, Field(ge=0, le=10000)]
Count = Annotated[int, Field(ge=0)]


class Record(BaseModel):
    """Base of every wire record: frozen, strict about unknown fields and non-finite floats."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class GpuSample(Record):
    """One GPU's metrics in one collection round. ``None`` means "not supported"."""

    uuid: GpuUuid
    index: Annotated[int, Field(ge=0, lt=1024)]
    model: Annotated[str, Field(min_length=1, max_length=128)]
    healthy: bool = Field(True, description="False when NVML reports the GPU lost or failing")
    gpu_util_pct: Percent | None = None
    mem_util_pct: Percent | None = Field(None, description="memory controller busy %")
    mem_used_bytes: Bytes | None = None
    mem_total_bytes: Bytes | None = None
    sm_active: Fraction | None = Field(None, description="GPM SM activity, Hopper and newer")
    temp_c: Celsius | None = None
    slowdown_temp_c: Celsius | None = None
    power_w: Watts | None = None
    power_limit_w: Watts | None = None
    sm_clock_mhz: MHz | None = None
    max_sm_clock_mhz: MHz | None = None
    clock_event_reasons: Annotated[int, Field(ge=0, lt=2**64)] | None = None
    ecc_uncorrected_volatile: Count | None = None
    remapped_rows_pending: bool | None = None
    pcie_tx_bytes_per_s: Annotated[float, Field(ge=0)] | None = None
    pcie_rx_bytes_per_s: Annotated[float, Field(ge=0)] | None = None

    @model_validator(mode="after")
    def _memory_fits(self) -> GpuSample:
        used, total = self.mem_used_bytes, self.mem_total_bytes
        if used is not None and total is not None and used > total:
            raise ValueError("mem_used_bytes exceeds mem_total_bytes")
        return self


class NodeSample(Record):
    """``fairlane.node-samples.v1``, key = node: every GPU of one node at one instant."""

    schema_: Literal["node-sample/1"] = Field("node-sample/1", alias="schema")
    node: NodeName
    ts_ms: EpochMs
    source: Literal["nvml", "sim"]
    driver_version: Annotated[str, Field(max_length=64)] | None = None
    gpus: Annotated[list[GpuSample], Field(min_length=1, max_length=64)]

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="after")
    def _unique_gpus(self) -> NodeSample:
        if len({g.uuid for g in self.gpus}) != len(self.gpus):
            raise ValueError("gpus: duplicate uuid in one node sample")
        return self


class GpuScore(Record):
    """``fairlane.gpu-scores.v1`` (compacted), key = GPU uuid: the GPU's current score."""

    schema_: Literal["gpu-score/1"] = Field("gpu-score/1", alias="schema")
    node: NodeName
    uuid: GpuUuid
    index: Annotated[int, Field(ge=0)]
    model: str
    score: Fraction
    speed: Annotated[float, Field(gt=0)] = Field(description="relative speed of the model")
    effective_capacity: Annotated[float, Field(ge=0)] = Field(description="score x speed")
    components: dict[str, Fraction | None]
    samples_in_window: Count
    stale: bool
    mem_total_bytes: Bytes | None = None
    ts_ms: EpochMs = Field(description="time of the newest sample behind this score")

    model_config = ConfigDict(populate_by_name=True)


class GpuSlot(Record):
    """One GPU handed to a job."""

    uuid: GpuUuid
    index: Annotated[int, Field(ge=0)]


class NodeAssignment(Record):
    """What one node of a placement runs with (the launcher's environment)."""

    node: NodeName
    node_rank: Annotated[int, Field(ge=0)]
    gpus: list[GpuSlot]
    cuda_visible_devices: str
    master_addr: NodeName
    master_port: Annotated[int, Field(ge=1, le=65535)]
    world_size: Annotated[int, Field(ge=1)]


class PlacementEvent(Record):
    """``fairlane.placements.v1``, key = placement id: one lifecycle change."""

    schema_: Literal["placement/1"] = Field("placement/1", alias="schema")
    placement_id: str
    job_id: str
    namespace: str
    event: Literal["created", "pending", "released", "expired", "failed"]
    ts_ms: EpochMs
    nodes: list[NodeAssignment]
    reason: str | None = None

    model_config = ConfigDict(populate_by_name=True)


class DeadLetter(Record):
    """``fairlane.dead-letter.v1``: a rejected record, why, and where it came from."""

    schema_: Literal["dead-letter/1"] = Field("dead-letter/1", alias="schema")
    ts_ms: EpochMs
    source_topic: str
    partition: Annotated[int, Field(ge=0)]
    offset: Annotated[int, Field(ge=0)]
    error: str
    key_b64: str | None = None
    value_b64: str = Field(description="the rejected value, base64, possibly truncated")
    value_size: Count
    truncated: bool

    model_config = ConfigDict(populate_by_name=True)
