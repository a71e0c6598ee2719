"""What a rank sends its launcher per timed step: one small JSON datagram.

    {"node_rank": 0, "local_rank": 3, "rank": 3, "compute_s": 0.412, "steps": 1}

``steps`` > 1 stands for that many steps of ``compute_s`` each (an nvrx report covers
several, fairlane.nvrx), at most :data:`MAX_STEPS` in one datagram.

``local_rank`` and ``rank`` may be null (the process did not know them); the launcher
then derives the rank, or drops the step when it cannot tell the GPU (never guesses).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import orjson

__all__ = ["MAX_STEPS", "StepSample", "decode_step", "encode_step"]

MAX_STEPS = 100_000


@dataclass(frozen=True)
class StepSample:
    node_rank: int
    local_rank: int | None
    rank: int | None
    compute_s: float
    steps: int = 1


def encode_step(sample: StepSample) -> bytes:
    return orjson.dumps(
        {
            "node_rank": sample.node_rank,
            "local_rank": sample.local_rank,
            "rank": sample.rank,
            "compute_s": sample.compute_s,
            "steps": sample.steps,
        }
    )


def _index(value: object) -> int | None:
    if value is None:
        return None
    if type(value) is not int or value < 0:
        raise ValueError("not a rank")
    return value


def decode_step(data: bytes) -> StepSample | None:
    """The sample, or None for anything malformed (a stray datagram must not stop a job)."""
    try:
        raw = orjson.loads(data)
        compute_s = raw["compute_s"]
        if type(compute_s) not in (int, float) or not math.isfinite(compute_s) or compute_s <= 0:
            return None
        node_rank = _index(raw["node_rank"])
        if node_rank is None:
            return None
        steps = raw.get("steps", 1)
        if type(steps) is not int or not 1 <= steps <= MAX_STEPS:
            return None
        return StepSample(
            node_rank, _index(raw["local_rank"]), _index(raw["rank"]), compute_s, steps
        )
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
        return None
