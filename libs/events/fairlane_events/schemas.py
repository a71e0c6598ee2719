"""JSON Schemas of every topic, generated from the record models.

The checked-in files under ``schemas/`` are what other systems read; a contract test
fails when they drift from the models. Regenerate with ``make schemas``.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from fairlane_events import topics
from fairlane_events.records import (
    DeadLetter,
    GpuScore,
    GpuSpeed,
    JobProgress,
    NodeSample,
    PlacementEvent,
    Record,
)

__all__ = ["SCHEMA_DIR", "TOPIC_RECORDS", "render_schema", "schema_path"]

SCHEMA_DIR = Path(__file__).parent / "schemas"

TOPIC_RECORDS: dict[str, type[Record]] = {
    topics.NODE_SAMPLES: NodeSample,
    topics.GPU_SCORES: GpuScore,
    topics.PLACEMENTS: PlacementEvent,
    topics.JOB_PROGRESS: JobProgress,
    topics.GPU_SPEEDS: GpuSpeed,
    topics.DEAD_LETTER: DeadLetter,
}


def schema_path(topic: str) -> Path:
    return SCHEMA_DIR / f"{topic}.schema.json"


def render_schema(topic: str) -> str:
    """The JSON Schema text for ``topic``, exactly as it is checked in."""
    schema = TOPIC_RECORDS[topic].model_json_schema(by_alias=True, mode="serialization")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = f"https://fairlane.dev/schemas/{topic}.schema.json"
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if a file is out of date")
    args = parser.parse_args()
    stale = []
    for topic in TOPIC_RECORDS:
        path, text = schema_path(topic), render_schema(topic)
        if args.check:
            if not path.exists() or path.read_text() != text:
                stale.append(path.name)
        else:
            path.parent.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        raise SystemExit(f"out of date: {', '.join(stale)} (run `make schemas`)")


if __name__ == "__main__":
    main()
