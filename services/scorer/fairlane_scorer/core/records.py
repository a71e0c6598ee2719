"""From a scored window to the record published on the scores topic (pure)."""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Protocol

import orjson

from fairlane_events.gpu_models import DEFAULT_SPEED, find_model
from fairlane_events.records import GpuScore
from fairlane_scoring.reference import ScoreResult

__all__ = ["GpuLabels", "Labelled", "model_speed", "score_json", "score_record"]


class Labelled(Protocol):
    """What a score record says of its GPU besides the score (a ``GpuWindow`` has it)."""

    @property
    def node(self) -> str: ...
    @property
    def index(self) -> int: ...
    @property
    def model(self) -> str: ...
    @property
    def mem_total_bytes(self) -> int | None: ...
    @property
    def activity(self) -> float | None: ...


@dataclass(frozen=True, slots=True)
class GpuLabels:
    node: str
    index: int
    model: str
    mem_total_bytes: int | None
    activity: float | None = None  # of the newest sample (fairlane_scoring.activity)


@functools.lru_cache(maxsize=4096)
def model_speed(model: str) -> tuple[float, bool]:
    """The model's relative speed, and whether it is known (unknown: the default).
    Cached: a fleet has a few models, and matching a name was a fifth of the time the
    worker spends per published score."""
    spec = find_model(model)
    return (DEFAULT_SPEED, False) if spec is None else (spec.relative_speed, True)


def score_record(uuid: str, window: Labelled, result: ScoreResult) -> GpuScore:
    speed, _ = model_speed(window.model)
    return GpuScore(
        schema_="gpu-score/1",
        node=window.node,
        uuid=uuid,
        index=window.index,
        model=window.model,
        score=result.score,
        speed=speed,
        effective_capacity=result.score * speed,
        components=dict(result.components),
        samples_in_window=result.samples_in_window,
        stale=result.stale,
        mem_total_bytes=window.mem_total_bytes,
        activity=_activity(window, result),
        ts_ms=result.ts_ms,
    )


def _activity(window: Labelled, result: ScoreResult) -> float | None:
    """The newest sample's activity; none on a stale score (it says nothing of now)."""
    return None if result.stale else window.activity


def score_json(uuid: str, window: Labelled, result: ScoreResult) -> bytes:
    """``encode(score_record(...))``, byte for byte, without building the pydantic model
    (a third of the worker's time per published score). Every field is in the schema's
    range by construction: the node's fields were validated on the way in, the score and
    components are clipped to 0..1, the speed comes from the model table; the unit test
    holds the bytes equal to the validated path's."""
    speed, _ = model_speed(window.model)
    score = float(result.score)
    return orjson.dumps(
        {
            "schema": "gpu-score/1",
            "node": window.node,
            "uuid": uuid,
            "index": window.index,
            "model": window.model,
            "score": score,
            "speed": speed,
            "effective_capacity": score * speed,
            "components": dict(result.components),
            "samples_in_window": result.samples_in_window,
            "stale": result.stale,
            "mem_total_bytes": window.mem_total_bytes,
            "activity": _activity(window, result),
            "ts_ms": result.ts_ms,
        }
    )
