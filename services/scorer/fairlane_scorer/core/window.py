"""Incremental per-GPU state of the streaming scorer (pure).

The Faust table stores one :class:`GpuWindow` per GPU as a JSON-able dict. Each accepted
sample appends its instant score; samples older than the history window are pruned. The
score is then the same decayed mean the reference computes over the whole history.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any

from fairlane_events.records import GpuSample
from fairlane_scoring.components import score_sample
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.reference import ScoreResult, summarise

__all__ = ["GpuWindow", "accept_sample", "score_window", "should_emit"]


@dataclass(frozen=True)
class GpuWindow:
    node: str
    index: int
    model: str
    mem_total_bytes: int | None
    ts_ms: tuple[int, ...]  # accepted samples inside the history window, oldest first
    instant: tuple[float, ...]
    components: dict[str, float | None]  # of the newest accepted sample
    last_ecc: int | None
    emitted_score: float | None = None  # what the scores topic last said...
    emitted_stale: bool | None = None
    emitted_at_ms: int | None = None  # ...and when (event time)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuWindow:
        return cls(**{**data, "ts_ms": tuple(data["ts_ms"]), "instant": tuple(data["instant"])})


def accept_sample(
    window: GpuWindow | None, node: str, ts_ms: int, sample: GpuSample, config: ScoreConfig
) -> GpuWindow | None:
    """The window with ``sample`` added, or None when it is not newer than the last one."""
    if window is not None and window.ts_ms and ts_ms <= window.ts_ms[-1]:
        return None
    previous_ecc = window.last_ecc if window is not None else None
    components, instant = score_sample(sample, previous_ecc, config)
    horizon = ts_ms - config.history_s * 1000
    kept = (
        [(t, v) for t, v in zip(window.ts_ms, window.instant, strict=True) if t >= horizon]
        if window
        else []
    )
    kept.append((ts_ms, instant))
    ecc = sample.ecc_uncorrected_volatile
    fresh = GpuWindow(
        node=node,
        index=sample.index,
        model=sample.model,
        mem_total_bytes=sample.mem_total_bytes,
        ts_ms=tuple(t for t, _ in kept),
        instant=tuple(v for _, v in kept),
        components=components,
        last_ecc=ecc if ecc is not None else previous_ecc,
    )
    if window is None:
        return fresh
    return replace(
        fresh,
        emitted_score=window.emitted_score,
        emitted_stale=window.emitted_stale,
        emitted_at_ms=window.emitted_at_ms,
    )


def score_window(window: GpuWindow, now_ms: int, config: ScoreConfig) -> ScoreResult:
    """The GPU's score at ``now_ms`` (same formula as ``reference_score``)."""
    return summarise(window.ts_ms, window.instant, window.components, now_ms, config)


def should_emit(window: GpuWindow, result: ScoreResult, now_ms: int, config: ScoreConfig) -> bool:
    """Emit when the score moved more than epsilon, staleness flipped, or the last emission
    is older than the heartbeat interval."""
    if window.emitted_score is None or window.emitted_at_ms is None:
        return True
    return (
        abs(result.score - window.emitted_score) > config.emit_epsilon
        or result.stale != window.emitted_stale
        or now_ms - window.emitted_at_ms >= config.heartbeat_s * 1000
    )
