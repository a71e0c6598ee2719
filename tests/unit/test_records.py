import math

import orjson
import pytest

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.dead_letter import MAX_DEAD_LETTER_VALUE_BYTES, dead_letter_for
from fairlane_events.records import NodeSample, PlacementEvent, Record, SlowGpu
from tests.factories import GIB, gpu_score, node_sample, single_gpu_placement


def test_node_sample_round_trips_with_wire_names() -> None:
    sample = node_sample()
    data = encode(sample)
    assert orjson.loads(data)["schema"] == "node-sample/1"
    assert decode(NodeSample, data) == sample


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"not json{", "not JSON"),
        (b"{}", "schema: Field required"),
        (
            orjson.dumps({**orjson.loads(encode(node_sample())), "schema": "node-sample/2"}),
            "schema:",
        ),
        (None, "tombstone"),
    ],
)
def test_decode_names_what_is_wrong(data: bytes | None, expected: str) -> None:
    with pytest.raises(DecodeError, match=expected):
        decode(NodeSample, data)


@pytest.mark.parametrize(
    "gpu",
    [
        {"temp_c": 10_000.0},
        {"mem_used_bytes": 81 * GIB},
        {"gpu_util_pct": -1.0},
        {"sm_active": 1.5},
    ],
)
def test_absurd_metrics_are_rejected(gpu: dict[str, float]) -> None:
    raw = orjson.loads(encode(node_sample()))
    raw["gpus"][0].update(gpu)
    with pytest.raises(DecodeError):
        decode(NodeSample, orjson.dumps(raw))


def test_non_finite_numbers_are_rejected() -> None:
    raw = encode(node_sample()).replace(b'"temp_c":40.0', b'"temp_c":NaN')
    with pytest.raises(DecodeError, match="not JSON"):
        decode(NodeSample, raw)
    with pytest.raises(ValueError, match="finite"):
        node_sample(temp_c=math.inf)


def test_duplicate_gpu_in_one_node_sample_is_rejected() -> None:
    raw = orjson.loads(encode(node_sample()))
    raw["gpus"].append(raw["gpus"][0])
    with pytest.raises(DecodeError, match="duplicate uuid"):
        decode(NodeSample, orjson.dumps(raw))


@pytest.mark.parametrize(
    "record",
    [
        node_sample(),
        gpu_score(),
        dead_letter_for(
            topic="t", partition=0, offset=1, key=None, value=b"x", error="e", now_ms=1
        ),
    ],
    ids=lambda r: type(r).__name__,
)
def test_the_models_field_name_for_schema_is_unknown_on_the_wire(record: Record) -> None:
    """``schema_`` names the field in Python only; the published schemas allow no such
    property (additionalProperties: false), so neither does the decoder."""
    data = encode(record)
    assert decode(type(record), data) == record
    raw = orjson.loads(data)
    with pytest.raises(DecodeError, match=r"^schema_: Extra inputs are not permitted"):
        decode(type(record), orjson.dumps({**raw, "schema_": raw["schema"]}))
    raw["schema_"] = raw.pop("schema")
    with pytest.raises(DecodeError, match=r"^schema: Field required"):
        decode(type(record), orjson.dumps(raw))


def test_dead_letter_keeps_origin_and_truncates_huge_values() -> None:
    value = b"x" * (MAX_DEAD_LETTER_VALUE_BYTES + 10)
    letter = dead_letter_for(
        topic="t", partition=3, offset=42, key=b"k", value=value, error="bad", now_ms=1
    )
    assert (letter.source_topic, letter.partition, letter.offset) == ("t", 3, 42)
    assert letter.truncated
    assert letter.value_size == len(value)


def test_a_degraded_event_names_its_slow_gpus_and_no_other_event_does() -> None:
    created = single_gpu_placement("n1", "GPU-a", "created", 1_700_000_000_000)
    slow = SlowGpu(uuid="GPU-a", node="n1", speed=0.46, source="learned")
    degraded = {**created.model_dump(by_alias=True), "event": "degraded"}
    assert decode(
        PlacementEvent,
        encode(PlacementEvent.model_validate({**degraded, "slow_gpus": [slow.model_dump()]})),
    ).slow_gpus == [slow]
    with pytest.raises(DecodeError, match="slow_gpus"):
        decode(PlacementEvent, orjson.dumps(degraded))
    with pytest.raises(DecodeError, match="slow_gpus"):
        decode(
            PlacementEvent,
            orjson.dumps({**created.model_dump(by_alias=True), "slow_gpus": [slow.model_dump()]}),
        )
