"""Incremental per-GPU state of the streaming scorer (pure).

The Faust table stores one :class:`GpuWindow` per GPU as a JSON-able dict: the accepted
samples still inside the history window (time, gate, raw and spike-filtered components).
Each new sample is filtered against the raw values of the samples before it, older ones
are pruned, and the score is computed from what is kept: the same numbers the batch
reference computes from the whole history.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from fairlane_events.records import GpuSample
from fairlane_scoring.components import component_scores, health_gate
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.outliers import filter_components
from fairlane_scoring.reference import ScoredSample, ScoreResult, summarise

__all__ = [
    "GpuWindow",
    "accept_sample",
    "is_overdue",
    "mark_emitted",
    "score_window",
    "should_emit",
]


@dataclass(frozen=True)
class GpuWindow:
    node: str
    index: int
    model: str
    mem_total_bytes: int | None
    samples: tuple[ScoredSample, ...]  # accepted, inside the history window, oldest first
    last_ecc: int | None  # the newest reported uncorrected ECC count (the gate's baseline)
    emitted_score: float | None = None  # what the scores topic last said...
    emitted_stale: bool | None = None
    emitted_at_ms: int | None = None  # ...and when (event time)

    @property
    def last_ts_ms(self) -> int:
        return self.samples[-1].ts_ms

    def to_dict(self) -> dict[str, Any]:
        return {
            "node": self.node,
            "index": self.index,
            "model": self.model,
            "mem_total_bytes": self.mem_total_bytes,
            "samples": [[s.ts_ms, s.gate, list(s.raw), list(s.filtered)] for s in self.samples],
            "last_ecc": self.last_ecc,
            "emitted_score": self.emitted_score,
            "emitted_stale": self.emitted_stale,
            "emitted_at_ms": self.emitted_at_ms,
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> GpuWindow:
        samples = tuple(
            ScoredSample(ts, gate, tuple(raw), tuple(filtered))
            for ts, gate, raw, filtered in data["samples"]
        )
        return cls(**{**data, "samples": samples})


def accept_sample(
    window: GpuWindow | None,
    node: str,
    ts_ms: int,
    sample: GpuSample,
    *,
    load_since_ms: float,
    config: ScoreConfig,
) -> GpuWindow | None:
    """The window with ``sample`` added, or None when it is not newer than the last one.
    ``load_since_ms``: where the GPU's load history restarts, as known at ``ts_ms``."""
    if window is not None and ts_ms <= window.last_ts_ms:
        return None
    horizon = ts_ms - config.history_s * 1000
    kept = [s for s in window.samples if s.ts_ms >= horizon] if window else []
    previous_ecc = window.last_ecc if window else None
    raw = component_scores(sample, config.thermal_margin_c)
    before = kept[max(0, len(kept) - config.hampel_window + 1) :]
    filtered = filter_components(
        [*((s.ts_ms, s.raw) for s in before), (ts_ms, raw)],
        load_since_ms,
        config.hampel_n_sigma,
        config.hampel_min_scale,
    )
    scored = ScoredSample(ts_ms, health_gate(sample, previous_ecc), raw, filtered)
    ecc = sample.ecc_uncorrected_volatile
    fresh = GpuWindow(
        node=node,
        index=sample.index,
        model=sample.model,
        mem_total_bytes=sample.mem_total_bytes,
        samples=(*kept, scored),
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


def score_window(
    window: GpuWindow, now_ms: int, load_since_ms: float, config: ScoreConfig
) -> ScoreResult:
    """The GPU's score at ``now_ms`` (same formula as ``reference_score``)."""
    return summarise(window.samples, now_ms, load_since_ms, config)


def should_emit(window: GpuWindow, result: ScoreResult, now_ms: int, config: ScoreConfig) -> bool:
    """Emit when the score moved more than epsilon, staleness flipped, the heartbeat is
    due, or the last emission is older than ``stale_after`` (the staleness timer may have
    published ``stale`` since: the table does not know, so the fresh score must follow)."""
    if window.emitted_score is None or window.emitted_at_ms is None:
        return True
    since_ms = now_ms - window.emitted_at_ms
    return (
        abs(result.score - window.emitted_score) > config.emit_epsilon
        or result.stale != window.emitted_stale
        or since_ms >= config.heartbeat_s * 1000
        or since_ms > config.stale_after_s * 1000
    )


def mark_emitted(window: GpuWindow, result: ScoreResult, now_ms: int) -> GpuWindow:
    """The window remembering what the scores topic was just told."""
    return replace(
        window, emitted_score=result.score, emitted_stale=result.stale, emitted_at_ms=now_ms
    )


def is_overdue(stored: dict[str, Any], now_ms: int, config: ScoreConfig) -> bool:
    """Whether a GPU's stored window (its table dict) has gone without a sample for longer
    than ``stale_after``: read without decoding the window, for the timer's fleet scan."""
    last_ts_ms: int = stored["samples"][-1][0]
    return now_ms - last_ts_ms > config.stale_after_s * 1000
