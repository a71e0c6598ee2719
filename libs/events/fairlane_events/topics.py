"""Kafka topic names and their creation specs: the only place topic names are spelled.

Partition counts matter beyond throughput: the scorer's Faust tables are co-partitioned
with ``NODE_SAMPLES`` (and, re-keyed by node, with ``PLACEMENTS``), so those topics must
keep the same partition count as the tables' changelogs. ``JOB_PROGRESS`` is keyed like
``PLACEMENTS`` (by placement id) and has as many partitions, so a job's progress records
land in the partition that holds its placement's allocation.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "ALL_TOPICS",
    "DEAD_LETTER",
    "GPU_SCORES",
    "GPU_SPEEDS",
    "JOB_PROGRESS",
    "NODE_SAMPLES",
    "PLACEMENTS",
    "STREAM_PARTITIONS",
    "TopicSpec",
]

NODE_SAMPLES = "fairlane.node-samples.v1"
GPU_SCORES = "fairlane.gpu-scores.v1"
PLACEMENTS = "fairlane.placements.v1"
DEAD_LETTER = "fairlane.dead-letter.v1"
#: What running jobs report of their ranks' compute time (key: placement id).
JOB_PROGRESS = "fairlane.job-progress.v1"
#: Each GPU's learned speed per job class (key: "<gpu uuid>/<job class>"), compacted.
GPU_SPEEDS = "fairlane.gpu-speeds.v1"

#: Partitions of every topic the scorer's tables are co-partitioned with.
STREAM_PARTITIONS = 8

_DAY_MS = 24 * 3600 * 1000


@dataclass(frozen=True)
class TopicSpec:
    """How a topic is created: name, partitions and topic-level configs."""

    name: str
    partitions: int
    configs: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))


ALL_TOPICS: tuple[TopicSpec, ...] = (
    TopicSpec(
        NODE_SAMPLES,
        STREAM_PARTITIONS,
        MappingProxyType({"cleanup.policy": "delete", "retention.ms": str(_DAY_MS)}),
    ),
    TopicSpec(
        GPU_SCORES,
        STREAM_PARTITIONS,
        # Compacted: a new consumer rebuilds the fleet's current state from it.
        MappingProxyType(
            {
                "cleanup.policy": "compact",
                "min.cleanable.dirty.ratio": "0.1",
                "segment.ms": str(3600 * 1000),
            }
        ),
    ),
    TopicSpec(
        PLACEMENTS,
        STREAM_PARTITIONS,
        MappingProxyType({"cleanup.policy": "delete", "retention.ms": str(7 * _DAY_MS)}),
    ),
    TopicSpec(
        JOB_PROGRESS,
        STREAM_PARTITIONS,
        MappingProxyType({"cleanup.policy": "delete", "retention.ms": str(7 * _DAY_MS)}),
    ),
    TopicSpec(
        GPU_SPEEDS,
        STREAM_PARTITIONS,
        # Compacted: a new consumer reads every GPU's current speed per class from it.
        MappingProxyType(
            {
                "cleanup.policy": "compact",
                "min.cleanable.dirty.ratio": "0.1",
                "segment.ms": str(3600 * 1000),
            }
        ),
    ),
    TopicSpec(
        DEAD_LETTER,
        1,
        MappingProxyType({"cleanup.policy": "delete", "retention.ms": str(7 * _DAY_MS)}),
    ),
)
