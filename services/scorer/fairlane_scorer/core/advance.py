"""Adding one new sample to each of many GPUs at once (pure numpy over the batch).

The worker's path (:func:`fairlane_scorer.core.step.score_batch`): the spike filter, the
instant scores and the decayed score run as numpy over all GPUs of a round
(:mod:`fairlane_scorer.core.vectors`). :func:`fairlane_scorer.core.window.accept_sample`
is the same step for one GPU, written with the reference's own functions; the parity
test holds both equal to the reference.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence

import numpy as np

from fairlane_scorer.core.vectors import (
    Scores,
    component_rows,
    decayed_scores,
    hampel_rows,
    instant_rows,
)
from fairlane_scorer.core.window import (
    RECENT_COLUMNS,
    FloatArray,
    GpuWindow,
    Update,
    components_of,
    successor,
)
from fairlane_scoring.components import Components, health_gate
from fairlane_scoring.config import COMPONENTS, LOAD_COMPONENTS, ScoreConfig
from fairlane_scoring.reference import ScoreResult, reported_components

__all__ = ["advance"]

_FIRST_LOAD = COMPONENTS.index(LOAD_COMPONENTS[0])


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
    raws = component_rows([u.sample for u in updates], margin)
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
        window = successor(
            u,
            flat[ends[j] - counts[j] : ends[j]].copy(),
            recent[j, k - in_recent[j] :].copy() if k > 1 else recent[j, :0].copy(),
            components_of(filtered[j]),
        )
        result = _result(
            window, scores, j, now_ms=u.ts_ms, load_since=u.load_since_ms, config=config
        )
        out.append((window, result))
    return out


class _Reported(Mapping[str, float | None]):
    """``reference.reported_components``, built only when read: most scores are not
    published (``should_emit``), and the dict was a tenth of the step's time."""

    __slots__ = ("_counted", "_filtered", "_made")

    def __init__(self, filtered: Components, counted: bool) -> None:
        self._filtered, self._counted = filtered, counted
        self._made: dict[str, float | None] | None = None

    def _dict(self) -> dict[str, float | None]:
        if self._made is None:
            self._made = reported_components(self._filtered, counted=self._counted)
        return self._made

    def __getitem__(self, name: str) -> float | None:
        return self._dict()[name]

    def __iter__(self) -> Iterator[str]:
        return iter(COMPONENTS)

    def __len__(self) -> int:
        return len(COMPONENTS)


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
        components=_Reported(window.filtered, counted=newest_ts >= load_since),
        samples_in_window=int(scores.samples_in_window[j]),
        stale=(now_ms - newest_ts) > config.stale_after_s * 1000,
        ts_ms=newest_ts,
    )
