"""The learner's input topic: what the scorer's other agents tell it, as bytes (pure).

The learner keeps every GPU's speed in one partition (a report teaches its ranks' GPUs
from each other, and a speed is read against all the GPUs of its model), so everything it
needs arrives on one single-partition internal topic, in the order it was sent:

- ``progress``: a :class:`~fairlane_scorer.core.progress.JoinedProgress`, from the agent
  that checked it against its placement;
- ``gpu``: a :class:`GpuInfo`, from the scoring agent, whenever what it says of a GPU
  moved (:func:`info_moved`) or at least every speed heartbeat: its node, its model, its
  clock health, the NVML prior's input (the score's ``clock`` component: SM clock / max
  SM clock while a throttle reason other than idle is active, else 1), and when it was
  sampled (the learner forgets a GPU neither sampled nor reported on for a retention).

The format is the scorer's own (not a wire contract): versioned JSON, read only by the
version that wrote it or a later one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from fairlane_scorer.core.progress import JoinedProgress, JoinedRank
from fairlane_scorer.errors import SpeedInputFormatError

__all__ = ["GpuInfo", "decode_input", "encode_gpu_info", "encode_progress", "info_moved"]

_VERSION = 1


@dataclass(frozen=True)
class GpuInfo:
    """What the scores say of one GPU: where it is, what it is, its clock health."""

    uuid: str
    node: str
    model: str
    clock: float | None  # None: the GPU reports no clocks
    seen_ms: int | None = None  # the scored sample's time (None: from an older version)


def info_moved(old: GpuInfo | None, new: GpuInfo, clock_epsilon: float) -> bool:
    """Whether ``new`` says something ``old`` did not: first news of the GPU, another
    node or model, a clock health appearing, vanishing or moving by more than
    ``clock_epsilon``."""
    if old is None or (old.node, old.model) != (new.node, new.model):
        return True
    if old.clock is None or new.clock is None:
        return (old.clock is None) != (new.clock is None)
    return abs(new.clock - old.clock) > clock_epsilon


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
            "clock": info.clock,
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
            clock, seen_ms = raw["clock"], raw.get("seen_ms")
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
