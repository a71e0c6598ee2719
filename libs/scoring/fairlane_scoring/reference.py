"""The reference score of one GPU from its whole sample history (batch form).

This is the definition; the streaming scorer keeps incremental state and must produce the
same numbers on the same input. The steps, each a named function elsewhere:

1. accept: a sample not newer than the last accepted one is ignored (redelivery, reordering);
2. components of each accepted sample (:mod:`~fairlane_scoring.components`), its load
   ones beyond what fractional allocations held at its time
   (:func:`~fairlane_scoring.allocation.held_at`), and its health gate against the
   previous ECC count;
3. causal Hampel filter per component over the last ``hampel_window`` accepted samples
   inside the history window; load components only over samples since the GPU's load
   history last restarted (:mod:`~fairlane_scoring.outliers`);
4. instant = health family mean x load family mean (:mod:`~fairlane_scoring.combine`),
   kept twice per sample: with its load, and with its load masked;
5. at ``now_ms``: samples before ``load_since_ms`` (Fairlane's own allocations,
   :mod:`~fairlane_scoring.allocation`) count with their load masked; score = min(gates
   inside the history window) x decayed mean of the instants (:mod:`~fairlane_scoring.decay`);
   stale when the newest sample is older than ``stale_after_s``.

:func:`score_kept` is step 5 on the four numbers each sample leaves behind, so that the
streaming scorer keeps only those (and the few raw samples the spike filter needs).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fairlane_events.records import GpuSample
from fairlane_scoring.allocation import Allocation, held_at, load_since_ms
from fairlane_scoring.combine import instant_score
from fairlane_scoring.components import Components, component_scores, health_gate
from fairlane_scoring.config import COMPONENTS, LOAD_COMPONENTS, ScoreConfig
from fairlane_scoring.decay import decayed_mean, in_history
from fairlane_scoring.outliers import filter_components

__all__ = [
    "KEPT_COLUMNS",
    "ScoreResult",
    "ScoredSample",
    "reference_score",
    "reported_components",
    "score_kept",
    "scored_history",
    "summarise",
]

#: What :func:`score_kept` needs of each sample, as the columns of one float64 row.
KEPT_COLUMNS = ("ts_ms", "gate", "instant", "instant_load_masked")

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class ScoredSample:
    """One accepted sample as the score keeps it."""

    ts_ms: int
    gate: float
    raw: Components  # as measured: the Hampel window of later samples
    filtered: Components  # after the spike filter: what the score uses
    instant: float  # of ``filtered``, load counted
    instant_load_masked: float  # of ``filtered``, health only

    def kept(self) -> tuple[float, float, float, float]:
        """The sample's row in KEPT_COLUMNS order."""
        return (self.ts_ms, self.gate, self.instant, self.instant_load_masked)


@dataclass(frozen=True)
class ScoreResult:
    score: float  # 0..1; 0 when no sample is inside the history window
    components: Mapping[str, float | None]  # of the newest sample; masked load: None
    samples_in_window: int
    stale: bool
    ts_ms: int  # newest accepted sample


def scored_history(
    history: Sequence[tuple[int, GpuSample]],
    config: ScoreConfig,
    allocations: Sequence[Allocation] = (),
) -> list[ScoredSample]:
    """The accepted samples of ``(ts_ms, sample)`` pairs in arrival order, scored; each
    filtered as of its own time (load windows restart where ``allocations`` end)."""
    accepted: list[tuple[int, GpuSample]] = []
    for ts_ms, sample in history:
        if not accepted or ts_ms > accepted[-1][0]:
            accepted.append((ts_ms, sample))
    raws = [
        component_scores(s, config.thermal_margin_c, held_at(allocations, ts_ms))
        for ts_ms, s in accepted
    ]
    scored: list[ScoredSample] = []
    previous_ecc: int | None = None
    for i, (ts_ms, sample) in enumerate(accepted):
        first = max(0, i - config.hampel_window + 1)
        horizon = ts_ms - config.history_s * 1000
        window = [
            (accepted[j][0], raws[j]) for j in range(first, i + 1) if accepted[j][0] >= horizon
        ]
        filtered = filter_components(
            window,
            load_since_ms(allocations, ts_ms),
            config.hampel_n_sigma,
            config.hampel_min_scale,
        )
        gate = health_gate(sample, previous_ecc)
        scored.append(scored_sample(ts_ms, gate, raws[i], filtered, config))
        if sample.ecc_uncorrected_volatile is not None:
            previous_ecc = sample.ecc_uncorrected_volatile
    return scored


def reference_score(
    history: Sequence[tuple[int, GpuSample]],
    now_ms: int,
    config: ScoreConfig,
    allocations: Sequence[Allocation] = (),
) -> ScoreResult:
    """Score a GPU at ``now_ms`` from its samples and Fairlane's allocations of it."""
    if not history:
        raise ValueError("history is empty")
    scored = scored_history(history, config, allocations)
    return summarise(scored, now_ms, load_since_ms(allocations, now_ms), config)


def scored_sample(
    ts_ms: int, gate: float, raw: Components, filtered: Components, config: ScoreConfig
) -> ScoredSample:
    weights = config.component_weights
    return ScoredSample(
        ts_ms,
        gate,
        raw,
        filtered,
        instant=instant_score(filtered, True, weights),
        instant_load_masked=instant_score(filtered, False, weights),
    )


def summarise(
    samples: Sequence[ScoredSample], now_ms: int, load_since: float, config: ScoreConfig
) -> ScoreResult:
    """The score at ``now_ms`` of accepted samples (ascending ``ts_ms``, non-empty)."""
    kept = np.array([s.kept() for s in samples], dtype=np.float64)
    return score_kept(kept, samples[-1].filtered, now_ms, load_since, config)


def score_kept(
    kept: FloatArray,
    newest_filtered: Components,
    now_ms: int,
    load_since: float,
    config: ScoreConfig,
) -> ScoreResult:
    """The score at ``now_ms`` of ``kept`` (one KEPT_COLUMNS row per accepted sample,
    ascending time, non-empty); load counts for samples at or after ``load_since``."""
    ts, gates, instants, masked = kept.T
    values = np.where(ts >= load_since, instants, masked)
    mean, n = decayed_mean(ts, values, now_ms, config.decay_rate_per_s, config.history_s)
    inside = in_history((now_ms - ts) / 1000.0, config.history_s)
    gate = float(gates[inside].min()) if n else 1.0
    newest_ts = int(ts[-1])
    return ScoreResult(
        # A weighted mean of values in 0..1 can round to just above 1 (1.0000000000000002),
        # which the scores topic's schema rejects: clip to the range it is defined on.
        score=0.0 if math.isnan(mean) else min(1.0, max(0.0, gate * mean)),
        components=reported_components(newest_filtered, counted=newest_ts >= load_since),
        samples_in_window=n,
        stale=(now_ms - newest_ts) > config.stale_after_s * 1000,
        ts_ms=newest_ts,
    )


def reported_components(filtered: Components, *, counted: bool) -> dict[str, float | None]:
    """The newest sample's filtered components as a score reports them: load ones None
    when its load is masked (``counted`` False)."""
    return {
        name: None if (name in LOAD_COMPONENTS and not counted) else value
        for name, value in zip(COMPONENTS, filtered, strict=True)
    }
