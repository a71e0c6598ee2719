"""The rules of the job-progress and gpu-speed records that a JSON Schema cannot state."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from fairlane_events.codec import DecodeError, decode, encode
from fairlane_events.records import GpuSpeed, JobProgress


def _progress(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "schema": "job-progress/1",
        "placement_id": "p-1",
        "job_class": "compute-bound",
        "ts_ms": 1_700_000_000_000,
        "window_s": 60.0,
        "steps_per_s": 2.0,
        "ranks": [
            {"rank": 0, "uuid": "GPU-a", "compute_s_per_step": 0.3, "steps": 120},
            {"rank": 1, "uuid": "GPU-b", "compute_s_per_step": 0.5, "steps": 120},
        ],
    }
    record.update(overrides)
    return record


def _speed(**overrides: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        "schema": "gpu-speed/1",
        "uuid": "GPU-a",
        "node": "n1",
        "model": "H100",
        "job_class": "llama-3-8b",
        "speed": 0.6,
        "low": 0.55,
        "high": 0.65,
        "reports": 3,
        "confidence": 0.8,
        "ts_ms": 1_700_000_000_000,
    }
    record.update(overrides)
    return record


def test_a_progress_record_round_trips() -> None:
    record = decode(JobProgress, orjson.dumps(_progress()))
    assert decode(JobProgress, encode(record)) == record


@pytest.mark.parametrize(
    ("rank", "uuid"), [(1, "GPU-a"), (0, "GPU-c")], ids=["uuid twice", "rank twice"]
)
def test_a_gpu_or_rank_named_twice_is_rejected(rank: int, uuid: str) -> None:
    ranks = _progress()["ranks"]
    ranks[1] = {**ranks[1], "rank": rank, "uuid": uuid}
    with pytest.raises(DecodeError, match="duplicate"):
        decode(JobProgress, orjson.dumps(_progress(ranks=ranks)))


@pytest.mark.parametrize("job_class", ["", "a/b", "-x", "x" * 65, "compute bound", "x\n"], ids=repr)
def test_a_job_class_is_a_bounded_label_without_slash(job_class: str) -> None:
    with pytest.raises(DecodeError, match="job_class"):
        decode(JobProgress, orjson.dumps(_progress(job_class=job_class)))


@pytest.mark.parametrize(
    "overrides",
    [{"window_s": 0}, {"steps_per_s": -1.0}, {"ranks": []}],
    ids=["empty window", "negative rate", "no ranks"],
)
def test_impossible_progress_is_rejected(overrides: dict[str, Any]) -> None:
    with pytest.raises(DecodeError):
        decode(JobProgress, orjson.dumps(_progress(**overrides)))


def test_a_rank_time_of_zero_is_rejected() -> None:
    ranks = _progress()["ranks"]
    ranks[0] = {**ranks[0], "compute_s_per_step": 0.0}
    with pytest.raises(DecodeError, match="compute_s_per_step"):
        decode(JobProgress, orjson.dumps(_progress(ranks=ranks)))


def test_a_speed_outside_its_interval_is_rejected() -> None:
    assert decode(GpuSpeed, orjson.dumps(_speed())).speed == 0.6
    with pytest.raises(DecodeError, match="between low and high"):
        decode(GpuSpeed, orjson.dumps(_speed(speed=0.7)))
