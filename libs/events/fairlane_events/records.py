"""The records on every Fairlane topic, as typed models (the wire contract).

Every record carries ``schema = "<name>/<major>"`` and integer epoch milliseconds.
A metric a GPU does not support is ``None`` (absent), never 0. Non-finite numbers are
rejected: they cannot be represented in JSON and would poison every score downstream.

The models accept exactly what their published JSON Schemas accept (a property test
generates records from each schema and its negations and checks both agree):

- numbers and booleans are strict: ``true`` is not 1, ``"42"`` is not 42, ``1`` is not
  ``true``. JSON has one number type, so an integral float (``3.0``) is an integer and an
  integer may stand for a float, exactly as JSON Schema's ``integer``/``number`` say;
- every integer has an upper bound (below 2^64), so no parser's big-integer
  handling decides what is valid;
- physically impossible values (a negative temperature, a slowdown threshold of 0 or
  below, negative power or clocks) are out of range;
- the rules a JSON Schema cannot state are few and named in the model's description:
  ``mem_used_bytes <= mem_total_bytes`` and no GPU uuid twice in one node sample; no
  GPU uuid or rank twice in one job-progress record; ``low <= speed <= high`` in a
  learned speed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, WithJsonSchema, model_validator

from fairlane_events.json_numbers import AS_INT, StrictBool, StrictFloat, StrictInt

__all__ = [
    "DeadLetter",
    "GpuSample",
    "GpuScore",
    "GpuSlot",
    "GpuSpeed",
    "JobProgress",
    "NodeAssignment",
    "NodeSample",
    "PlacementEvent",
    "RankProgress",
    "Record",
    "SlowGpu",
]

#: The largest integer any record carries (a signed 64-bit integer).
MAX_INT = 2**63 - 1


# Strict numbers and booleans, with JSON's one number type (fairlane_events.json_numbers).
Float = StrictFloat
Bool = StrictBool

NodeName = Annotated[str, Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._-]+$")]
GpuUuid = Annotated[str, Field(min_length=1, max_length=96)]
EpochMs = Annotated[StrictInt, Field(gt=0, lt=10**14), AS_INT]
GpuIndex = Annotated[StrictInt, Field(ge=0, lt=1024), AS_INT]
Bytes = Annotated[StrictInt, Field(ge=0, le=2**50), AS_INT]
Count = Annotated[StrictInt, Field(ge=0, le=MAX_INT), AS_INT]
Percent = Annotated[Float, Field(ge=0, le=100)]
Fraction = Annotated[Float, Field(ge=0, le=1)]
BytesPerS = Annotated[Float, Field(ge=0, le=2**50)]
Celsius = Annotated[Float, Field(ge=0, le=250)]  # NVML reports unsigned degrees
SlowdownCelsius = Annotated[Float, Field(gt=0, le=250)]
Watts = Annotated[Float, Field(ge=0, le=5000)]
MHz = Annotated[Float, Field(ge=0, le=10000)]
PlacementId = Annotated[str, Field(min_length=1, max_length=256)]
# A job class names a kind of work (``compute-bound``, a model name): a bounded label
# without "/", which separates it from the GPU uuid in the speeds topic's keys.
JobClass = Annotated[
    str, Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9._+-]*$")
]
StepSeconds = Annotated[Float, Field(gt=0, le=86_400)]
Speed = Annotated[Float, Field(gt=0, le=1000)]


class Record(BaseModel):
    """Base of every wire record: frozen, strict about unknown fields and non-finite floats."""

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)


class GpuSample(Record):
    """One GPU's metrics in one collection round. ``None`` means "not supported".

    Beyond the schema: mem_used_bytes <= mem_total_bytes when both are given.
    """

    uuid: GpuUuid
    index: GpuIndex
    model: Annotated[str, Field(min_length=1, max_length=128)]
    healthy: Bool = Field(
        True, description="False when NVML or DCGM reports the GPU lost or failing"
    )
    gpu_util_pct: Percent | None = None
    mem_util_pct: Percent | None = Field(None, description="memory controller busy %")
    mem_used_bytes: Bytes | None = None
    mem_total_bytes: Bytes | None = None
    sm_active: Fraction | None = Field(None, description="GPM SM activity, Hopper and newer")
    temp_c: Celsius | None = None
    slowdown_temp_c: SlowdownCelsius | None = Field(
        None, description="the GPU's own slowdown threshold"
    )
    power_w: Watts | None = None
    power_limit_w: Watts | None = None
    sm_clock_mhz: MHz | None = None
    max_sm_clock_mhz: MHz | None = None
    clock_event_reasons: Annotated[StrictInt, Field(ge=0, lt=2**64), AS_INT] | None = None
    ecc_uncorrected_volatile: Count | None = None
    remapped_rows_pending: Bool | None = None
    pcie_tx_bytes_per_s: BytesPerS | None = None
    pcie_rx_bytes_per_s: BytesPerS | None = None

    @model_validator(mode="after")
    def _memory_fits(self) -> GpuSample:
        used, total = self.mem_used_bytes, self.mem_total_bytes
        if used is not None and total is not None and used > total:
            raise ValueError("mem_used_bytes exceeds mem_total_bytes")
        return self


class NodeSample(Record):
    """``fairlane.node-samples.v1``, key = node: every GPU of one node at one instant.

    Beyond the schema: no GPU uuid appears twice in one record.
    """

    schema_: Literal["node-sample/1"] = Field(alias="schema")
    node: NodeName
    ts_ms: EpochMs
    source: Literal["nvml", "sim", "dcgm"]
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

    schema_: Literal["gpu-score/1"] = Field(alias="schema")
    node: NodeName
    uuid: GpuUuid
    index: GpuIndex
    model: str
    score: Fraction
    speed: Annotated[Float, Field(gt=0, le=1000)] = Field(description="relative speed of the model")
    effective_capacity: Annotated[Float, Field(ge=0, le=1000)] = Field(description="score x speed")
    components: dict[str, Fraction | None]
    samples_in_window: Count
    stale: Bool
    mem_total_bytes: Bytes | None = None
    activity: Fraction | None = Field(
        None,
        description="the GPU's own compute activity in its newest sample, whoever runs on "
        "it (max of sm_active and gpu_util_pct / 100; load masking does not hide it); "
        "absent when stale or not reported",
    )
    ts_ms: EpochMs = Field(description="time of the newest sample behind this score")

    model_config = ConfigDict(populate_by_name=True)


class GpuSlot(Record):
    """One GPU handed to a job; ``share`` and ``memory_mib`` only when the job holds a
    share of it (issue 29: a fractional placement), absent on whole GPUs."""

    uuid: GpuUuid
    index: GpuIndex
    share: Annotated[Float, Field(gt=0, le=1)] | None = Field(
        None, description="fractional placements only: the share of the GPU's compute held"
    )
    memory_mib: Annotated[StrictInt, Field(ge=1, le=2**31 - 1), AS_INT] | None = Field(
        None, description="fractional placements only: the GPU memory the share may use"
    )


_ENV_NAME = r"^[A-Z][A-Z0-9_]*$"
#: Environment variables by name. The schema closes the object to such names, as the
#: model does (pydantic alone would write only ``patternProperties``, which lets any
#: other key through).
Env = Annotated[
    dict[Annotated[str, Field(pattern=_ENV_NAME)], str],
    WithJsonSchema(
        {
            "type": "object",
            "patternProperties": {_ENV_NAME: {"type": "string"}},
            "additionalProperties": False,
        }
    ),
]


class NodeAssignment(Record):
    """What one node of a placement runs with (the launcher's environment)."""

    node: NodeName
    node_rank: Annotated[StrictInt, Field(ge=0, lt=2**16), AS_INT]
    gpus: list[GpuSlot]
    cuda_visible_devices: str
    master_addr: NodeName
    master_port: Annotated[StrictInt, Field(ge=1, le=65535), AS_INT]
    world_size: Annotated[StrictInt, Field(ge=1, le=2**16), AS_INT]
    env: Env | None = Field(
        None,
        description="fractional placements only: what the job sets to stay inside its share "
        "(CUDA_MPS_ACTIVE_THREAD_PERCENTAGE, memory limits; docs/fractional.md)",
    )


class SlowGpu(Record):
    """One GPU of a running placement found slow, and by what."""

    uuid: GpuUuid
    node: NodeName
    speed: Annotated[Float, Field(ge=0, le=1000)] = Field(
        description="learned: the GPU's speed under the job's class (1 = its model's typical "
        "GPU); score: its capacity score (0 when its health gate is shut)"
    )
    source: Literal["learned", "score"]


class PlacementEvent(Record):
    """``fairlane.placements.v1``, key = placement id: one lifecycle change.

    ``degraded`` changes nothing of the allocation: it tells the job's launcher which of its
    GPUs run slow (``slow_gpus``), so that it can checkpoint and move. ``idle`` changes
    nothing of the allocation either: every GPU of the placement has been near-idle since
    ``idle_since_ms``; ``lease_expires_ms`` is set when its namespace's policy shortened
    the lease (the placement expires then unless it gets busy again).

    Beyond the schema: ``slow_gpus`` is non-empty on ``degraded`` events and absent (or
    null) on all others; ``idle_since_ms`` is given on ``idle`` events and absent (or null)
    on all others, and so is ``lease_expires_ms`` (which ``idle`` may omit).
    """

    schema_: Literal["placement/1"] = Field(alias="schema")
    placement_id: str
    job_id: str
    namespace: str
    event: Literal["created", "pending", "released", "expired", "failed", "degraded", "idle"]
    ts_ms: EpochMs
    nodes: list[NodeAssignment]
    reason: str | None = None
    slow_gpus: list[SlowGpu] | None = Field(
        None, description="degraded only: the placement's GPUs found slow"
    )
    idle_since_ms: EpochMs | None = Field(
        None, description="idle only: since when every GPU of the placement has been near-idle"
    )
    lease_expires_ms: EpochMs | None = Field(
        None, description="idle only: the lease as the namespace's idle policy shortened it"
    )

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="after")
    def _slow_gpus_with_degraded(self) -> PlacementEvent:
        if (self.event == "degraded") != bool(self.slow_gpus):
            raise ValueError("slow_gpus: required (non-empty) on degraded events, else absent")
        if (self.event == "idle") != (self.idle_since_ms is not None):
            raise ValueError("idle_since_ms: required on idle events, else absent")
        if self.event != "idle" and self.lease_expires_ms is not None:
            raise ValueError("lease_expires_ms: only on idle events")
        return self


class DeadLetter(Record):
    """``fairlane.dead-letter.v1``: a rejected record, why, and where it came from."""

    schema_: Literal["dead-letter/1"] = Field(alias="schema")
    ts_ms: EpochMs
    source_topic: str
    partition: Annotated[StrictInt, Field(ge=0, lt=2**31), AS_INT]
    offset: Count
    error: str
    key_b64: str | None = None
    value_b64: str = Field(description="the rejected value, base64, possibly truncated")
    value_size: Count
    truncated: Bool

    model_config = ConfigDict(populate_by_name=True)


class RankProgress(Record):
    """One rank of a job over one window: its GPU and how fast it computed."""

    rank: Annotated[StrictInt, Field(ge=0, lt=2**16), AS_INT]
    uuid: GpuUuid = Field(description="the GPU the rank ran on (one of its placement's)")
    compute_s_per_step: StepSeconds = Field(
        description="compute-only seconds per step, collective waits excluded"
    )
    steps: Count = Field(description="steps counted in the window")


class JobProgress(Record):
    """``fairlane.job-progress.v1``, key = placement id: one job's ranks over one window.

    Beyond the schema: no GPU uuid and no rank appears twice in one record.
    """

    schema_: Literal["job-progress/1"] = Field(alias="schema")
    placement_id: PlacementId
    job_class: JobClass = Field(
        description="the user's label for the kind of work (compute-bound, a model name)"
    )
    ts_ms: EpochMs = Field(description="end of the window")
    window_s: StepSeconds = Field(description="how long the window was")
    steps_per_s: Annotated[Float, Field(ge=0, le=1e9)] = Field(
        description="the job's own steps per second over the window"
    )
    ranks: Annotated[list[RankProgress], Field(min_length=1, max_length=4096)]

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="after")
    def _unique_ranks(self) -> JobProgress:
        if len({r.uuid for r in self.ranks}) != len(self.ranks):
            raise ValueError("ranks: duplicate uuid in one progress record")
        if len({r.rank for r in self.ranks}) != len(self.ranks):
            raise ValueError("ranks: duplicate rank in one progress record")
        return self


class GpuSpeed(Record):
    """``fairlane.gpu-speeds.v1`` (compacted), key = ``"<gpu uuid>/<job class>"``: what the
    scorer has learned of one GPU's speed under one job class.

    Beyond the schema: low <= speed <= high.
    """

    schema_: Literal["gpu-speed/1"] = Field(alias="schema")
    uuid: GpuUuid
    node: NodeName
    model: Annotated[str, Field(min_length=1, max_length=128)]
    job_class: JobClass
    speed: Speed = Field(
        description="relative to the model's typical GPU under this job class (1 = typical)"
    )
    low: Speed = Field(description="lower end of the speed's 95 % interval")
    high: Speed = Field(description="upper end of the speed's 95 % interval")
    reports: Count = Field(description="progress reports behind the speed")
    confidence: Fraction = Field(
        description="the reports' share of the estimate (0: the NVML prior alone)"
    )
    ts_ms: EpochMs = Field(description="when the speed was estimated")

    model_config = ConfigDict(populate_by_name=True)

    @model_validator(mode="after")
    def _ordered(self) -> GpuSpeed:
        if not self.low <= self.speed <= self.high:
            raise ValueError("speed must lie between low and high")
        return self
