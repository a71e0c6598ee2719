"""The checked-in JSON Schemas are the contract other systems read: they must match the
models, and the records we produce must validate against them."""

import json

import jsonschema
import orjson
import pytest

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.dead_letter import dead_letter_for
from fairlane_events.fast_samples import decode_fast
from fairlane_events.records import (
    GpuSlot,
    GpuSpeed,
    JobProgress,
    NodeAssignment,
    PlacementEvent,
    RankProgress,
    Record,
)
from fairlane_events.schemas import TOPIC_RECORDS, render_schema, schema_path
from fairlane_events.topics import (
    ALL_TOPICS,
    DEAD_LETTER,
    GPU_SCORES,
    GPU_SPEEDS,
    JOB_PROGRESS,
    NODE_SAMPLES,
    PLACEMENTS,
)
from tests.factories import gpu_score, node_sample

EXAMPLES: dict[str, Record] = {
    NODE_SAMPLES: node_sample(),
    GPU_SCORES: gpu_score(components={"clock": 1.0, "compute": None}),
    PLACEMENTS: PlacementEvent(
        schema_="placement/1",
        placement_id="p",
        job_id="j",
        namespace="default",
        event="created",
        ts_ms=1,
        nodes=[
            NodeAssignment(
                node="n",
                node_rank=0,
                gpus=[GpuSlot(uuid="GPU-1", index=0)],
                cuda_visible_devices="0",
                master_addr="n",
                master_port=29500,
                world_size=1,
            )
        ],
    ),
    JOB_PROGRESS: JobProgress(
        schema_="job-progress/1",
        placement_id="p",
        job_class="compute-bound",
        ts_ms=1,
        window_s=60.0,
        steps_per_s=2.5,
        ranks=[
            RankProgress(rank=0, uuid="GPU-1", compute_s_per_step=0.3, steps=150),
            RankProgress(rank=1, uuid="GPU-2", compute_s_per_step=0.5, steps=150),
        ],
    ),
    GPU_SPEEDS: GpuSpeed(
        schema_="gpu-speed/1",
        uuid="GPU-2",
        node="n",
        model="NVIDIA H100 80GB HBM3",
        job_class="compute-bound",
        speed=0.6,
        low=0.55,
        high=0.65,
        reports=12,
        confidence=0.9,
        ts_ms=1,
    ),
    DEAD_LETTER: dead_letter_for(
        topic=NODE_SAMPLES, partition=0, offset=0, key=None, value=b"x", error="e", now_ms=1
    ),
}


def test_every_topic_has_a_record_model_and_a_schema_file() -> None:
    assert set(TOPIC_RECORDS) == {t.name for t in ALL_TOPICS} == set(EXAMPLES)


@pytest.mark.parametrize("topic", sorted(TOPIC_RECORDS))
def test_checked_in_schema_matches_the_model(topic: str) -> None:
    assert schema_path(topic).read_text() == render_schema(topic), "run `make schemas`"


@pytest.mark.parametrize("topic", sorted(TOPIC_RECORDS))
def test_produced_records_validate_against_the_schema(topic: str) -> None:
    schema = json.loads(schema_path(topic).read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    jsonschema.validate(orjson.loads(encode(EXAMPLES[topic])), schema)


def test_schema_rejects_a_missing_field() -> None:
    schema = json.loads(schema_path(NODE_SAMPLES).read_text())
    record = orjson.loads(encode(EXAMPLES[NODE_SAMPLES]))
    del record["node"]
    with pytest.raises(jsonschema.ValidationError, match="'node' is a required property"):
        jsonschema.validate(record, schema)


@pytest.mark.parametrize("topic", sorted(TOPIC_RECORDS))
def test_a_record_without_its_schema_is_rejected_everywhere(topic: str) -> None:
    """docs/design-contract.md: every record carries ``schema``. The schema, the model and
    (for node samples) the msgspec fast path all refuse a record that lacks it."""
    record = orjson.loads(encode(EXAMPLES[topic]))
    del record["schema"]
    with pytest.raises(jsonschema.ValidationError, match="'schema' is a required property"):
        jsonschema.validate(record, json.loads(schema_path(topic).read_text()))
    with pytest.raises(DecodeError, match="schema: Field required"):
        decode(TOPIC_RECORDS[topic], orjson.dumps(record))
    if topic == NODE_SAMPLES:
        assert decode_fast(orjson.dumps(record)) is None


@pytest.mark.parametrize("topic", [GPU_SCORES, GPU_SPEEDS])
def test_current_state_topics_are_compacted(topic: str) -> None:
    spec = next(t for t in ALL_TOPICS if t.name == topic)
    assert spec.configs["cleanup.policy"] == "compact"


def test_progress_is_partitioned_like_the_placements_it_is_joined_with() -> None:
    parts = {t.name: t.partitions for t in ALL_TOPICS}
    assert parts[JOB_PROGRESS] == parts[PLACEMENTS]
