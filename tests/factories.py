"""Small builders of valid records for tests."""

from __future__ import annotations

from typing import Any

from fairlane_events.records import (
    GpuSample,
    GpuScore,
    GpuSlot,
    GpuSpeed,
    NodeAssignment,
    NodeSample,
    PlacementEvent,
)

GIB = 1024**3


def gpu_sample(**overrides: Any) -> GpuSample:
    values: dict[str, Any] = {
        "uuid": "GPU-0000",
        "index": 0,
        "model": "NVIDIA H100 80GB HBM3",
        "gpu_util_pct": 0.0,
        "mem_util_pct": 0.0,
        "mem_used_bytes": 0,
        "mem_total_bytes": 80 * GIB,
        "sm_active": 0.0,
        "temp_c": 40.0,
        "slowdown_temp_c": 90.0,
        "power_w": 70.0,
        "power_limit_w": 700.0,
        "sm_clock_mhz": 1980.0,
        "max_sm_clock_mhz": 1980.0,
        "clock_event_reasons": 0,
        "ecc_uncorrected_volatile": 0,
        "remapped_rows_pending": False,
    }
    values.update(overrides)
    return GpuSample(**values)


def node_sample(node: str = "node-a", ts_ms: int = 1_700_000_000_000, **gpu: Any) -> NodeSample:
    return NodeSample(
        schema_="node-sample/1", node=node, ts_ms=ts_ms, source="sim", gpus=[gpu_sample(**gpu)]
    )


def gpu_score(**overrides: Any) -> GpuScore:
    values: dict[str, Any] = {
        "schema_": "gpu-score/1",
        "node": "node-a",
        "uuid": "GPU-0000",
        "index": 0,
        "model": "NVIDIA H100 80GB HBM3",
        "score": 0.9,
        "speed": 2.0,
        "effective_capacity": 1.8,
        "components": {},
        "samples_in_window": 5,
        "stale": False,
        "mem_total_bytes": 80 * GIB,
        "ts_ms": 1_700_000_000_000,
    }
    values.update(overrides)
    if "effective_capacity" not in overrides:
        values["effective_capacity"] = values["score"] * values["speed"]
    return GpuScore(**values)


def gpu_speed(**overrides: Any) -> GpuSpeed:
    """A learned speed record; ``low``/``high`` default to +-0.02 around ``speed``."""
    speed = overrides.get("speed", 1.0)
    values: dict[str, Any] = {
        "schema_": "gpu-speed/1",
        "uuid": "GPU-0000",
        "node": "node-a",
        "model": "NVIDIA H100 80GB HBM3",
        "job_class": "bert",
        "speed": speed,
        "low": max(speed - 0.02, 0.001),
        "high": speed + 0.02,
        "reports": 12,
        "confidence": 0.8,
        "ts_ms": 1_700_000_000_000,
    }
    values.update(overrides)
    return GpuSpeed(**values)


def single_gpu_placement(
    node: str,
    uuid: str,
    kind: str,
    ts_ms: int,
    placement_id: str | None = None,
    share: float | None = None,
) -> PlacementEvent:
    """A lifecycle event of a one-GPU placement (GPU index 0 of ``node``); ``share``: of
    a fractional one (its memory that share of 80 GiB)."""
    pid = placement_id or f"p-{uuid}"
    memory_mib = None if share is None else int(share * 80 * 1024)
    assignment = NodeAssignment(
        node=node,
        node_rank=0,
        gpus=[GpuSlot(uuid=uuid, index=0, share=share, memory_mib=memory_mib)],
        cuda_visible_devices="0",
        master_addr=node,
        master_port=29500,
        world_size=1,
    )
    return PlacementEvent(
        schema_="placement/1",
        placement_id=pid,
        job_id=f"j-{pid}",
        namespace="it",
        event=kind,
        ts_ms=ts_ms,
        nodes=[assignment],
    )
