"""Node samples decoded by msgspec: the scorer's fast path, never wider than the schema.

:class:`~fairlane_events.records.NodeSample` stays the wire contract (the schemas are
generated from it). The structs below state the same JSON Schema in msgspec's terms, and
:func:`decode_node_sample` takes a record through them first: msgspec decodes an 8-GPU
sample in about an eighth of pydantic-core's CPU time (``bench.scorer_decode``), and the
scorer reads the struct as it read the model. The fast path may only be narrower than
the schema, never wider; what it refuses goes through
:func:`fairlane_events.codec.decode`, which decides (and words the dead letter):

- JSON's one number type: msgspec refuses ``3.0`` for an integer, which the schema takes;
- integers: msgspec reads any size, and its bounds fit in an int64: every bound is the
  schema's except ``clock_event_reasons``, cut to 2**63 - 1 here (the schema: < 2**64);
- ``pattern`` is an ECMA-262 regex in the schema but ``re.search`` in msgspec, where
  ``$`` also matches before a final newline: the node pattern ends in ``\\Z`` here;
- a duplicate key: the last one counts in both, but msgspec also refuses an invalid
  value that a later one replaces;
- JSON itself (lone surrogates, control characters, NaN, a BOM, trailing content) is
  read as pydantic-core reads it, and the two rules beyond the schema are checked after
  the struct is built.

tests/property/test_fast_samples.py holds every record this path accepts equal, value
and type, to what the pydantic path gives, on records drawn from the schema and its
near misses.
"""

from __future__ import annotations

from typing import Annotated, Literal

import msgspec

from fairlane_events.codec import decode
from fairlane_events.records import MAX_INT, GpuSample, NodeSample

__all__ = [
    "AnyGpuSample",
    "AnyNodeSample",
    "FastGpuSample",
    "FastNodeSample",
    "decode_fast",
    "decode_node_sample",
]

_NodeName = Annotated[
    str, msgspec.Meta(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9._-]+\Z")
]
_GpuUuid = Annotated[str, msgspec.Meta(min_length=1, max_length=96)]
_EpochMs = Annotated[int, msgspec.Meta(gt=0, lt=10**14)]
_Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_INT)]
_Bytes = Annotated[int, msgspec.Meta(ge=0, le=2**50)]
_Percent = Annotated[float, msgspec.Meta(ge=0, le=100)]
_Watts = Annotated[float, msgspec.Meta(ge=0, le=5000)]
_MHz = Annotated[float, msgspec.Meta(ge=0, le=10000)]
_BytesPerS = Annotated[float, msgspec.Meta(ge=0, le=2**50)]


class FastGpuSample(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False
):
    """:class:`~fairlane_events.records.GpuSample`'s fields, types and bounds. Frozen like
    the model; untracked by the garbage collector (a sample holds no cycle): cheaper to
    build."""

    uuid: _GpuUuid
    index: Annotated[int, msgspec.Meta(ge=0, lt=1024)]
    model: Annotated[str, msgspec.Meta(min_length=1, max_length=128)]
    healthy: bool = True
    gpu_util_pct: _Percent | None = None
    mem_util_pct: _Percent | None = None
    mem_used_bytes: _Bytes | None = None
    mem_total_bytes: _Bytes | None = None
    sm_active: Annotated[float, msgspec.Meta(ge=0, le=1)] | None = None
    temp_c: Annotated[float, msgspec.Meta(ge=0, le=250)] | None = None
    slowdown_temp_c: Annotated[float, msgspec.Meta(gt=0, le=250)] | None = None
    power_w: _Watts | None = None
    power_limit_w: _Watts | None = None
    sm_clock_mhz: _MHz | None = None
    max_sm_clock_mhz: _MHz | None = None
    clock_event_reasons: _Count | None = None  # narrower than the schema's < 2**64
    ecc_uncorrected_volatile: _Count | None = None
    remapped_rows_pending: bool | None = None
    pcie_tx_bytes_per_s: _BytesPerS | None = None
    pcie_rx_bytes_per_s: _BytesPerS | None = None


class FastNodeSample(
    msgspec.Struct, frozen=True, forbid_unknown_fields=True, kw_only=True, gc=False
):
    """:class:`~fairlane_events.records.NodeSample`'s fields, types and bounds."""

    schema_: Literal["node-sample/1"] = msgspec.field(name="schema")
    node: _NodeName
    ts_ms: _EpochMs
    source: Literal["nvml", "sim", "dcgm"]
    driver_version: Annotated[str, msgspec.Meta(max_length=64)] | None = None
    gpus: Annotated[list[FastGpuSample], msgspec.Meta(min_length=1, max_length=64)]


#: What the scorer reads a node sample as: the fast struct, or the model when the
#: pydantic path decided. Both have the same attributes with the same values.
AnyNodeSample = FastNodeSample | NodeSample
AnyGpuSample = FastGpuSample | GpuSample

_DECODER = msgspec.json.Decoder(FastNodeSample)


def _beyond_schema_rules_hold(sample: FastNodeSample) -> bool:
    """``GpuSample._memory_fits`` and ``NodeSample._unique_gpus``."""
    for g in sample.gpus:
        used, total = g.mem_used_bytes, g.mem_total_bytes
        if used is not None and total is not None and used > total:
            return False
    return len({g.uuid for g in sample.gpus}) == len(sample.gpus)


def decode_fast(data: bytes) -> FastNodeSample | None:
    """The record if msgspec and the rules beyond the schema accept it, else None (then
    the pydantic path decides)."""
    try:
        sample = _DECODER.decode(data)
    except msgspec.DecodeError:  # and its ValidationError
        return None
    return sample if _beyond_schema_rules_hold(sample) else None


def decode_node_sample(data: bytes | None) -> AnyNodeSample:
    """``decode(NodeSample, data)``'s record, or its :class:`DecodeError`, msgspec first."""
    fast = None if data is None else decode_fast(data)
    return decode(NodeSample, data) if fast is None else fast
