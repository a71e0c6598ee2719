"""Incremental per-GPU state of the streaming scorer (pure).

A GPU's state keeps, for each accepted sample still inside the history window, the four
numbers the score needs (``fairlane_scoring.reference.KEPT_COLUMNS``: time, health gate,
instant with and without load), plus the raw components of the last few samples for the
spike filter. Each new sample is filtered against those, older ones are pruned, and the
score is computed from what is kept: the same numbers the batch reference computes from
the whole history (tests/property/test_scorer_parity.py). :func:`accept_sample` does it
for one GPU with the reference's own functions (the evaluation's path);
:func:`fairlane_scorer.core.advance.advance` for many at once in numpy (the worker's).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from fairlane_events.records import GpuSample
from fairlane_scoring.activity import gpu_activity
from fairlane_scoring.allocation import NOTHING_HELD, Held
from fairlane_scoring.components import Components, component_scores, health_gate
from fairlane_scoring.config import COMPONENTS, ScoreConfig
from fairlane_scoring.outliers import filter_components
from fairlane_scoring.reference import KEPT_COLUMNS, ScoreResult, score_kept, scored_sample

__all__ = [
    "RECENT_COLUMNS",
    "FloatArray",
    "GpuWindow",
    "Update",
    "accept_sample",
    "components_of",
    "is_overdue",
    "mark_emitted",
    "score_window",
    "should_emit",
    "successor",
]

FloatArray = npt.NDArray[np.float64]
#: Columns of ``GpuWindow.recent``: the sample's time, then its raw components (NaN: None).
RECENT_COLUMNS = ("ts_ms", *COMPONENTS)
_NOTHING_KEPT = np.empty((0, len(KEPT_COLUMNS)), dtype=np.float64)
_NOTHING_RECENT = np.empty((0, len(RECENT_COLUMNS)), dtype=np.float64)


@dataclass(frozen=True, eq=False)
class GpuWindow:
    node: str
    index: int
    model: str
    mem_total_bytes: int | None
    kept: FloatArray  # KEPT_COLUMNS rows of the accepted samples in the window, oldest first
    recent: FloatArray  # RECENT_COLUMNS rows of the spike filter's window, oldest first
    filtered: Components  # the newest sample's components after the spike filter
    last_ecc: int | None  # the newest reported uncorrected ECC count (the gate's baseline)
    emitted_score: float | None = None  # what the scores topic last said...
    emitted_stale: bool | None = None
    emitted_at_ms: int | None = None  # ...and when (event time)
    activity: float | None = None  # of the newest sample (fairlane_scoring.activity)

    @property
    def last_ts_ms(self) -> int:
        return int(self.kept[-1, 0])


@dataclass(frozen=True)
class Update:
    """One new sample for one GPU: ``previous`` is its window (None: a new GPU), known to
    be older than ``ts_ms``; ``load_since_ms`` is where its load history restarts."""

    previous: GpuWindow | None
    node: str
    ts_ms: int
    sample: GpuSample
    load_since_ms: float


def components_of(values: FloatArray) -> Components:
    """Components from a row of floats (NaN: None)."""
    return tuple(None if math.isnan(v) else v for v in values.tolist())


def successor(u: Update, kept: FloatArray, recent: FloatArray, filtered: Components) -> GpuWindow:
    """The GPU's window after ``u``: these rows, the sample's own fields, the ECC
    baseline moved on, what was last emitted carried over."""
    previous = u.previous
    ecc = u.sample.ecc_uncorrected_volatile
    previous_ecc = None if previous is None else previous.last_ecc
    return GpuWindow(
        node=u.node,
        index=u.sample.index,
        model=u.sample.model,
        mem_total_bytes=u.sample.mem_total_bytes,
        kept=kept,
        recent=recent,
        filtered=filtered,
        last_ecc=ecc if ecc is not None else previous_ecc,
        emitted_score=None if previous is None else previous.emitted_score,
        emitted_stale=None if previous is None else previous.emitted_stale,
        emitted_at_ms=None if previous is None else previous.emitted_at_ms,
        activity=gpu_activity(u.sample),
    )


def _recent_row(ts_ms: int, raw: Components) -> FloatArray:
    return np.array([[ts_ms, *raw]], dtype=np.float64)  # None: NaN


def accept_sample(
    window: GpuWindow | None,
    node: str,
    ts_ms: int,
    sample: GpuSample,
    *,
    load_since_ms: float,
    config: ScoreConfig,
    held: Held = NOTHING_HELD,
) -> GpuWindow | None:
    """The window with ``sample`` added, or None when it is not newer than the last one:
    the one-GPU form of ``fairlane_scorer.core.advance.advance``, with the reference's
    functions. ``load_since_ms``: where the GPU's load history restarts at ``ts_ms``;
    ``held``: what fractional tenants hold of the GPU then."""
    if window is not None and ts_ms <= window.last_ts_ms:
        return None
    horizon = ts_ms - config.history_s * 1000
    kept, recent = _NOTHING_KEPT, _NOTHING_RECENT
    if window is not None:
        kept = window.kept[int(np.searchsorted(window.kept[:, 0], horizon, side="left")) :]
        recent = window.recent[window.recent[:, 0] >= horizon]
    raw = component_scores(sample, config.thermal_margin_c, held)
    history = [(int(r[0]), components_of(r[1:])) for r in recent]
    filtered = filter_components(
        [*history, (ts_ms, raw)], load_since_ms, config.hampel_n_sigma, config.hampel_min_scale
    )
    previous_ecc = None if window is None else window.last_ecc
    scored = scored_sample(ts_ms, health_gate(sample, previous_ecc), raw, filtered, config)
    recent = np.vstack([recent, _recent_row(ts_ms, raw)])
    update = Update(window, node, ts_ms, sample, load_since_ms)
    return successor(
        update,
        np.vstack([kept, scored.kept()]),
        recent[max(0, len(recent) - (config.hampel_window - 1)) :],
        filtered,
    )


def score_window(
    window: GpuWindow, now_ms: int, load_since_ms: float, config: ScoreConfig
) -> ScoreResult:
    """The GPU's score at ``now_ms`` (same formula as ``reference_score``)."""
    return score_kept(window.kept, window.filtered, now_ms, load_since_ms, config)


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


def is_overdue(window: GpuWindow, now_ms: int, config: ScoreConfig) -> bool:
    """Whether the GPU has gone without a sample for longer than ``stale_after``."""
    return now_ms - window.last_ts_ms > config.stale_after_s * 1000
