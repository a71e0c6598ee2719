"""The published JSON Schemas and the record models accept exactly the same records.

Records are drawn from each topic's checked-in schema and from its near misses (one
field of the wrong type, a bound just crossed, a key dropped or added ...), sent through
the wire path the services use (UTF-8 JSON bytes -> ``decode``), and judged by both: a
record the schema rejects must never be accepted (and so never scored), and one it
accepts must not be rejected, except by the few rules a JSON Schema cannot state, which
the models name in their descriptions.
"""

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import orjson
import pytest
import regress
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema.exceptions import ValidationError

from fairlane_events.codec import DecodeError, decode
from fairlane_events.schemas import TOPIC_RECORDS, schema_path
from fairlane_events.topics import GPU_SPEEDS, JOB_PROGRESS, NODE_SAMPLES, PLACEMENTS
from tests.property.schema_strategies import instances, near_misses

TOPICS = sorted(TOPIC_RECORDS)


def _ecma_pattern(
    validator: Any, pattern: str, instance: Any, schema: Any
) -> Iterator[ValidationError]:
    """``pattern`` is an ECMA-262 regex (JSON Schema 2020-12, 6.3.3), as pydantic's
    engine reads it; Python's ``re`` would let ``$`` match before a final newline."""
    if validator.is_type(instance, "string") and regress.Regex(pattern).find(instance) is None:
        yield ValidationError(f"{instance!r} does not match {pattern!r}")


_Validator = jsonschema.validators.extend(  # type: ignore[no-untyped-call]
    jsonschema.Draft202012Validator, {"pattern": _ecma_pattern}
)


def _schema(topic: str) -> dict[str, Any]:
    return dict(json.loads(schema_path(topic).read_text()))


def _beyond_schema_rules_hold(topic: str, record: dict[str, Any]) -> bool:
    """The rules the models' descriptions name and a JSON Schema cannot state."""
    if topic == JOB_PROGRESS:
        ranks = record["ranks"]
        return len({r["uuid"] for r in ranks}) == len({r["rank"] for r in ranks}) == len(ranks)
    if topic == GPU_SPEEDS:
        return bool(record["low"] <= record["speed"] <= record["high"])
    if topic == PLACEMENTS:
        idle = record["event"] == "idle"
        return bool(
            (record["event"] == "degraded") == bool(record.get("slow_gpus"))
            and idle == (record.get("idle_since_ms") is not None)
            and (idle or record.get("lease_expires_ms") is None)
        )
    if topic != NODE_SAMPLES:
        return True
    gpus = record["gpus"]
    uuids = [g["uuid"] for g in gpus]
    memory_fits = all(
        g.get("mem_used_bytes") is None
        or g.get("mem_total_bytes") is None
        or g["mem_used_bytes"] <= g["mem_total_bytes"]
        for g in gpus
    )
    return memory_fits and len(set(uuids)) == len(uuids)


def _model_accepts(topic: str, wire: bytes) -> bool:
    try:
        decode(TOPIC_RECORDS[topic], wire)
    except DecodeError:
        return False
    return True


def _assert_agree(topic: str, candidate: Any) -> None:
    # The stdlib writes any integer; orjson (the services' parser) reads it back as the
    # services will, and both judges look at that same value.
    wire = json.dumps(candidate).encode()
    try:
        parsed = orjson.loads(wire)
    except orjson.JSONDecodeError:
        assert not _model_accepts(topic, wire)
        return
    schema_accepts = _Validator(_schema(topic)).is_valid(parsed)
    expected = schema_accepts and _beyond_schema_rules_hold(topic, parsed)
    assert _model_accepts(topic, wire) == expected, (
        f"schema {'accepts' if schema_accepts else 'rejects'} {parsed!r}"
    )


_SETTINGS = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@pytest.mark.parametrize("topic", TOPICS)
@_SETTINGS
@given(data=st.data())
def test_records_drawn_from_the_schema_are_accepted_by_both(topic: str, data: Any) -> None:
    record = data.draw(instances(_schema(topic)))
    assert _Validator(_schema(topic)).is_valid(record), "the strategy drew a schema-invalid record"
    _assert_agree(topic, record)


@pytest.mark.parametrize("topic", TOPICS)
@_SETTINGS
@given(data=st.data())
def test_schema_and_model_agree_on_near_misses(topic: str, data: Any) -> None:
    _assert_agree(topic, data.draw(near_misses(_schema(topic))))


@pytest.mark.parametrize(
    "gpu",
    [
        {"gpu_util_pct": True},
        {"index": True},
        {"healthy": 1},
        {"temp_c": "40"},
        {"temp_c": -1.0},
        {"slowdown_temp_c": -5.0},
        {"slowdown_temp_c": 0},
        {"remapped_rows_pending": 0},
    ],
)
def test_lax_values_the_schema_rejects_are_rejected(gpu: dict[str, Any]) -> None:
    record = {
        "schema": "node-sample/1",
        "node": "n1",
        "ts_ms": 1_700_000_000_000,
        "source": "sim",
        "gpus": [{"uuid": "GPU-1", "index": 0, "model": "H100", **gpu}],
    }
    assert not _Validator(_schema(NODE_SAMPLES)).is_valid(record)
    assert not _model_accepts(NODE_SAMPLES, json.dumps(record).encode())
    record_true_ts = {**record, "gpus": [{"uuid": "GPU-1", "index": 0, "model": "H"}]}
    record_true_ts["ts_ms"] = True
    assert not _model_accepts(NODE_SAMPLES, json.dumps(record_true_ts).encode())


def test_an_integral_float_is_an_integer_as_json_says() -> None:
    record = {
        "schema": "node-sample/1",
        "node": "n1",
        "ts_ms": 1.7e12,
        "source": "sim",
        "gpus": [{"uuid": "GPU-1", "index": 0.0, "model": "H100"}],
    }
    assert _Validator(_schema(NODE_SAMPLES)).is_valid(record)
    assert _model_accepts(NODE_SAMPLES, json.dumps(record).encode())
