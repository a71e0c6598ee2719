"""The scorer's fast decoder (msgspec, ``fairlane_events.fast_samples``) is never wider
than the pydantic path, and reads what it accepts as the same record.

The pydantic path (``decode``) accepts exactly the published schema
(tests/property/test_record_schemas.py), so a record the fast path accepts is in the
schema. Records are drawn from the node-sample schema and its near misses; for each one
the fast path either refuses it or gives every field the value *and type* the model
gives. It refuses only what its module names (integral floats for integers,
``clock_event_reasons`` from 2**63): anything else the schema accepts it must accept,
or the scorer would pay for the slow path without a reason.
"""

import json
from typing import Any

import msgspec
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fairlane_events.codec import DecodeError, decode
from fairlane_events.fast_samples import FastNodeSample, decode_fast
from fairlane_events.records import MAX_INT, NodeSample
from fairlane_events.schemas import schema_path
from fairlane_events.topics import NODE_SAMPLES
from tests.property.schema_strategies import instances, near_misses

SCHEMA = json.loads(schema_path(NODE_SAMPLES).read_text())
_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _as_json(record: Any) -> bytes:
    """Every field by its wire name, with its Python type kept (5 is not 5.0)."""
    return orjson.dumps(record, option=orjson.OPT_SORT_KEYS)


def same_record(fast: FastNodeSample, model: NodeSample) -> bool:
    return _as_json(msgspec.to_builtins(fast)) == _as_json(model.model_dump(by_alias=True))


def _pydantic(wire: bytes) -> NodeSample | None:
    try:
        return decode(NodeSample, wire)
    except DecodeError:
        return None


def _assert_narrower_and_equal(wire: bytes) -> FastNodeSample | None:
    fast = decode_fast(wire)
    if fast is not None:
        model = _pydantic(wire)
        assert model is not None, f"the fast path accepts what the schema rejects: {wire!r}"
        assert same_record(fast, model), wire
    return fast


def _integral_floats_as_ints(value: Any) -> Any:
    """The same JSON numbers, integral ones written as integers (``3.0`` -> ``3``)."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, list):
        return [_integral_floats_as_ints(v) for v in value]
    if isinstance(value, dict):
        return {k: _integral_floats_as_ints(v) for k, v in value.items()}
    return value


@_SETTINGS
@given(record=instances(SCHEMA))
def test_records_of_the_schema_decode_to_the_models_values(record: Any) -> None:
    _assert_narrower_and_equal(json.dumps(record).encode())
    plain = _integral_floats_as_ints(record)
    wire = json.dumps(plain).encode()
    fast = _assert_narrower_and_equal(wire)
    reasons = [g.get("clock_event_reasons") or 0 for g in plain["gpus"]]
    if _pydantic(wire) is not None and max(reasons) <= MAX_INT:
        assert fast is not None, f"the fast path refuses a record it should take: {wire!r}"


@_SETTINGS
@given(record=near_misses(SCHEMA))
def test_near_misses_are_refused_or_decoded_as_the_model_does(record: Any) -> None:
    _assert_narrower_and_equal(json.dumps(record).encode())
    _assert_narrower_and_equal(json.dumps(_integral_floats_as_ints(record)).encode())


_GPU_FIELDS = sorted(SCHEMA["$defs"]["GpuSample"]["properties"])
_ODD_VALUES: list[Any] = [-1, 0, 0.5, 2**63, 2**64, None, True, "x", "bad name", []]


@_SETTINGS
@given(
    record=instances(SCHEMA),
    top=st.sampled_from(sorted(SCHEMA["properties"])),
    field=st.sampled_from(_GPU_FIELDS),
    value=st.sampled_from(_ODD_VALUES),
)
def test_a_key_written_twice_counts_as_the_model_counts_it(
    record: Any, top: str, field: str, value: Any
) -> None:
    """Where a JSON object is not a dict: a key before the drawn one (the last counts)."""
    wire = json.dumps(_integral_floats_as_ints(record)).encode()
    _assert_narrower_and_equal(wire.replace(b"{", b"{" + _member(top, value), 1))
    first_gpu = b'"gpus": [{'
    _assert_narrower_and_equal(wire.replace(first_gpu, first_gpu + _member(field, value), 1))


def _member(key: str, value: Any) -> bytes:
    return json.dumps({key: value}).encode()[1:-1] + b", "
