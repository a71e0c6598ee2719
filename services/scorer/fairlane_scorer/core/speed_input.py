"""The learner's input topic: what the scorer's other agents tell it, as bytes (pure).

The learner keeps every GPU's speed in one partition (a report teaches its ranks' GPUs
from each other, and a speed is read against all the GPUs of its model), so everything it
needs arrives on one single-partition internal topic, in the order it was sent:

- ``progress``: a :class:`~fairlane_scorer.core.progress.JoinedProgress`, from the agent
  that checked it against its placement;
- ``gpu``: a :class:`GpuInfo`, from the scoring agent, whenever what it says of a GPU
  moved (:func:`info_moved`) or at least every speed heartbeat: its node, its model, its
  SM clock while busy (:func:`busy_clocks`), the NVML prior's input, and when it was
  sampled (the learner forgets a GPU neither sampled nor reported on for a retention).

The format is the scorer's own (not a wire contract): versioned JSON, read only by the
version that wrote it or a later one.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import orjson

from fairlane_events.fast_samples import AnyNodeSample
from fairlane_scorer.core.progress import JoinedProgress, JoinedRank
from fairlane_scorer.errors import SpeedInputFormatError

__all__ = [
    "BUSY_GPU_UTIL_PCT",
    "BUSY_SM_ACTIVE",
    "GpuInfo",
    "busy_clocks",
    "decode_input",
    "encode_gpu_info",
    "encode_progress",
    "info_moved",
]

_VERSION = 1


#: A GPU is busy (its SM clock says what it runs compute at) at this SM activity, or,
#: where the GPU has no SM-activity counter, at this utilisation.
BUSY_SM_ACTIVE = 0.8
BUSY_GPU_UTIL_PCT = 80.0


@dataclass(frozen=True)
class GpuInfo:
    """What the scorer knows of one GPU: where it is, what it is, its SM clock while
    busy (the NVML prior's input) and when it was last sampled."""

    uuid: str
    node: str
    model: str
    busy_clock_mhz: float | None  # None: not seen busy (with a clock) yet
    seen_ms: int | None = None  # the scored sample's time (None: from an older version)


def busy_clocks(samples: Iterable[AnyNodeSample]) -> dict[str, float]:
    """Each GPU's SM clock in its last sample of ``samples`` in which it was busy.

    At full load a GPU's SM clock is what power, thermals or a fault leave it (a healthy
    H200 runs SGEMM SW-power-capped at 1470 of 1980 MHz), so the clock while busy, against
    its model's fleet median, tracks its compute speed (PAL's Longhorn data: r = -0.94
    with SGEMM time); an idle GPU's clock says nothing of it."""
    clocks: dict[str, float] = {}
    for sample in samples:
        for gpu in sample.gpus:
            if gpu.sm_clock_mhz is None or gpu.sm_clock_mhz <= 0:
                continue
            if gpu.sm_active is not None:
                busy = gpu.sm_active >= BUSY_SM_ACTIVE
            else:
                busy = gpu.gpu_util_pct is not None and gpu.gpu_util_pct >= BUSY_GPU_UTIL_PCT
            if busy:
                clocks[gpu.uuid] = float(gpu.sm_clock_mhz)
    return clocks


def info_moved(old: GpuInfo | None, new: GpuInfo, clock_epsilon: float) -> bool:
    """Whether ``new`` says something ``old`` did not: first news of the GPU, another
    node or model, a busy clock appearing, vanishing or moving by more than the fraction
    ``clock_epsilon``."""
    if old is None or (old.node, old.model) != (new.node, new.model):
        return True
    if old.busy_clock_mhz is None or new.busy_clock_mhz is None:
        return (old.busy_clock_mhz is None) != (new.busy_clock_mhz is None)
    return abs(new.busy_clock_mhz / old.busy_clock_mhz - 1.0) > clock_epsilon


def encode_progress(joined: JoinedProgress) -> bytes:
    return orjson.dumps(
        {
            "v": _VERSION,
            "kind": "progress",
            "placement_id": joined.placement_id,
            "job_class": joined.job_class,
            "ts_ms": joined.ts_ms,
            "window_s": joined.window_s,
            "ranks": [[r.uuid, r.node, r.compute_s_per_step] for r in joined.ranks],
        }
    )


def encode_gpu_info(info: GpuInfo) -> bytes:
    return orjson.dumps(
        {
            "v": _VERSION,
            "kind": "gpu",
            "uuid": info.uuid,
            "node": info.node,
            "model": info.model,
            "busy_clock_mhz": info.busy_clock_mhz,
            "seen_ms": info.seen_ms,
        }
    )


def decode_input(data: bytes | None) -> JoinedProgress | GpuInfo:
    """One record of the learner's input topic, or :class:`SpeedInputFormatError`."""
    try:
        raw: Any = orjson.loads(data or b"")
        if raw["v"] != _VERSION:
            raise SpeedInputFormatError(f"unknown speed-input version {raw['v']!r}")
        if raw["kind"] == "gpu":
            # Older versions sent the clock health as "clock": not a clock, left out.
            clock, seen_ms = raw.get("busy_clock_mhz"), raw.get("seen_ms")
            return GpuInfo(
                str(raw["uuid"]),
                str(raw["node"]),
                str(raw["model"]),
                None if clock is None else float(clock),
                None if seen_ms is None else int(seen_ms),
            )
        if raw["kind"] == "progress":
            return JoinedProgress(
                placement_id=str(raw["placement_id"]),
                job_class=str(raw["job_class"]),
                ts_ms=int(raw["ts_ms"]),
                window_s=float(raw["window_s"]),
                ranks=tuple(
                    JoinedRank(str(uuid), str(node), float(t)) for uuid, node, t in raw["ranks"]
                ),
            )
        raise SpeedInputFormatError(f"unknown speed-input kind {raw['kind']!r}")
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError) as exc:
        if isinstance(exc, SpeedInputFormatError):
            raise
        raise SpeedInputFormatError(f"not a speed-input record: {exc!r}") from exc
