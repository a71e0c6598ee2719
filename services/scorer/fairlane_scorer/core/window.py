"""Incremental per-GPU state of the streaming scorer, advanced many GPUs at a time (pure).

A GPU's state keeps, for each accepted sample still inside the history window, the four
numbers the score needs (``fairlane_scoring.reference.KEPT_COLUMNS``: time, health gate,
instant with and without load), plus the raw components of the last few samples for the
spike filter. :func:`advance` adds one new sample to each of many GPUs at once: the spike
filter, the instant scores and the decayed score run as numpy over all of them
(:mod:`fairlane_scorer.core.vectors`); older rows are pruned. The numbers are the ones
the batch reference computes from the whole history (tests/property/test_scorer_parity.py).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from fairlane_events.records import GpuSample
from fairlane_scorer.core.vectors import Scores, decayed_scores, hampel_rows, instant_rows
from fairlane_scoring.components import Components, component_scores, health_gate
from fairlane_scoring.config import COMPONENTS, LOAD_COMPONENTS, ScoreConfig
from fairlane_scoring.reference import ScoreResult, reported_components

__all__ = [
    "RECENT_COLUMNS",
    "GpuWindow",
    "Update",
    "accept_sample",
    "advance",
    "is_overdue",
    "mark_emitted",
    "score_window",
    "score_windows",
    "should_emit",
]

FloatArray = npt.NDArray[np.float64]
#: Columns of ``GpuWindow.recent``: the sample's time, then its raw components (NaN: None).
RECENT_COLUMNS = ("ts_ms", *COMPONENTS)
_FIRST_LOAD = COMPONENTS.index(LOAD_COMPONENTS[0])


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


def _components(values: FloatArray) -> Components:
    return tuple(None if math.isnan(v) else v for v in values.tolist())


def _recent_rows(updates: Sequence[Update], raws: FloatArray, k: int) -> FloatArray:
    """(GPUs, k, RECENT_COLUMNS): each GPU's recent rows with the new sample last, NaN
    rows in front where it has fewer."""
    rows = np.full((len(updates), k, len(RECENT_COLUMNS)), np.nan)
    for j, u in enumerate(updates):
        if u.previous is not None and k > 1:
            recent = u.previous.recent[max(0, len(u.previous.recent) - (k - 1)) :]
            rows[j, k - 1 - len(recent) : k - 1] = recent
    rows[:, -1, 0] = [u.ts_ms for u in updates]
    rows[:, -1, 1:] = raws
    return rows


def _spike_windows(rows: FloatArray, horizon: FloatArray, since: FloatArray) -> FloatArray:
    """(GPUs, components, k): each component's causal window of ``_recent_rows``, newest
    last; NaN for samples outside the history window and, for load components, before
    the load history restarted (``fairlane_scoring.outliers.filter_components``)."""
    rows = rows.copy()
    ts = rows[:, :, 0]
    with np.errstate(invalid="ignore"):
        rows[ts < horizon[:, None]] = np.nan
        before = ts < since[:, None]
    load = rows[:, :, 1 + _FIRST_LOAD :]
    load[before] = np.nan
    return np.swapaxes(rows[:, :, 1:], 1, 2)


def advance(updates: Sequence[Update], config: ScoreConfig) -> list[tuple[GpuWindow, ScoreResult]]:
    """Each GPU's window with its new sample added, and its score at the sample's time."""
    if not updates:
        return []
    margin = config.thermal_margin_c
    raws = np.array([component_scores(u.sample, margin) for u in updates], dtype=np.float64)
    ts = np.array([u.ts_ms for u in updates], dtype=np.float64)
    horizon = ts - config.history_s * 1000
    since = np.array([u.load_since_ms for u in updates])
    recent = _recent_rows(updates, raws, config.hampel_window)
    filtered = hampel_rows(
        _spike_windows(recent, horizon, since), config.hampel_n_sigma, config.hampel_min_scale
    )
    instants, masked = instant_rows(filtered, config.component_weights)
    gates = [
        health_gate(u.sample, None if u.previous is None else u.previous.last_ecc) for u in updates
    ]
    new_rows = np.column_stack([ts, gates, instants, masked])
    pieces: list[FloatArray] = []
    for j, u in enumerate(updates):
        if u.previous is not None:
            pieces.append(u.previous.kept)
        pieces.append(new_rows[j : j + 1])
    lengths = np.array([1 + (0 if u.previous is None else len(u.previous.kept)) for u in updates])
    flat = np.concatenate(pieces)
    seg = np.repeat(np.arange(len(updates)), lengths)
    inside = flat[:, 0] >= horizon[seg]
    flat = flat[inside]
    counts = np.bincount(seg[inside], minlength=len(updates)).tolist()
    ends = np.cumsum(counts).tolist()
    scores = decayed_scores(flat, np.array(ends) - counts, ts, since, config)
    # The spike filter's next window: the newest k - 1 rows inside the history window.
    with np.errstate(invalid="ignore"):
        in_recent = np.count_nonzero(recent[:, 1:, 0] >= horizon[:, None], axis=1).tolist()
    k = config.hampel_window
    out = []
    for j, u in enumerate(updates):
        window = _next_window(
            u,
            flat[ends[j] - counts[j] : ends[j]].copy(),
            recent[j, k - in_recent[j] :].copy() if k > 1 else recent[j, :0].copy(),
            _components(filtered[j]),
        )
        result = _result(
            window, scores, j, now_ms=u.ts_ms, load_since=u.load_since_ms, config=config
        )
        out.append((window, result))
    return out


def _next_window(
    u: Update, kept: FloatArray, recent: FloatArray, filtered: Components
) -> GpuWindow:
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
    )


def _result(
    window: GpuWindow,
    scores: Scores,
    j: int,
    *,
    now_ms: int,
    load_since: float,
    config: ScoreConfig,
) -> ScoreResult:
    newest_ts = window.last_ts_ms
    return ScoreResult(
        score=scores.score(j),
        components=reported_components(window.filtered, counted=newest_ts >= load_since),
        samples_in_window=int(scores.samples_in_window[j]),
        stale=(now_ms - newest_ts) > config.stale_after_s * 1000,
        ts_ms=newest_ts,
    )


def accept_sample(
    window: GpuWindow | None,
    node: str,
    ts_ms: int,
    sample: GpuSample,
    *,
    load_since_ms: float,
    config: ScoreConfig,
) -> GpuWindow | None:
    """The window with ``sample`` added, or None when it is not newer than the last one
    (:func:`advance` for one GPU)."""
    if window is not None and ts_ms <= window.last_ts_ms:
        return None
    return advance([Update(window, node, ts_ms, sample, load_since_ms)], config)[0][0]


def score_windows(
    windows: Sequence[GpuWindow], now_ms: int, load_since: Sequence[float], config: ScoreConfig
) -> list[ScoreResult]:
    """Each GPU's score at ``now_ms`` (the formula of ``reference.score_kept``)."""
    if not windows:
        return []
    lengths = [len(w.kept) for w in windows]
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]]).astype(np.intp)
    now = np.full(len(windows), float(now_ms))
    since = np.asarray(load_since, dtype=np.float64)
    flat = np.concatenate([w.kept for w in windows])
    scores = decayed_scores(flat, starts, now, since, config)
    return [
        _result(w, scores, j, now_ms=now_ms, load_since=since_j, config=config)
        for j, (w, since_j) in enumerate(zip(windows, load_since, strict=True))
    ]


def score_window(
    window: GpuWindow, now_ms: int, load_since_ms: float, config: ScoreConfig
) -> ScoreResult:
    """The GPU's score at ``now_ms`` (same formula as ``reference_score``)."""
    return score_windows([window], now_ms, [load_since_ms], config)[0]


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
