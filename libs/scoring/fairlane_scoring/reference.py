"""The reference score of one GPU from its whole sample history (batch form).

This is the definition; the streaming scorer keeps incremental state and must produce the
same numbers on the same input.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fairlane_events.records import GpuSample
from fairlane_scoring.components import score_sample
from fairlane_scoring.config import ScoreConfig
from fairlane_scoring.decay import decayed_mean

__all__ = ["ScoreResult", "reference_score", "summarise"]


@dataclass(frozen=True)
class ScoreResult:
    score: float  # 0..1; 0 when no sample is inside the history window
    components: Mapping[str, float | None]  # of the newest accepted sample
    samples_in_window: int
    stale: bool
    ts_ms: int  # newest accepted sample


def reference_score(
    history: Sequence[tuple[int, GpuSample]], now_ms: int, config: ScoreConfig
) -> ScoreResult:
    """Score a GPU from ``(ts_ms, sample)`` pairs in arrival order.

    A sample whose ts_ms is not newer than the last accepted one is ignored (redelivery,
    reordering). The score is the decayed mean of the accepted samples' instant scores.
    """
    if not history:
        raise ValueError("history is empty")
    ts_list: list[int] = []
    instants: list[float] = []
    components: Mapping[str, float | None] = {}
    previous_ecc: int | None = None
    for ts_ms, sample in history:
        if ts_list and ts_ms <= ts_list[-1]:
            continue
        components, instant = score_sample(sample, previous_ecc, config)
        instants.append(instant)
        ts_list.append(ts_ms)
        if sample.ecc_uncorrected_volatile is not None:
            previous_ecc = sample.ecc_uncorrected_volatile
    return summarise(ts_list, instants, components, now_ms, config)


def summarise(
    ts_ms: Sequence[int],
    instants: Sequence[float],
    components: Mapping[str, float | None],
    now_ms: int,
    config: ScoreConfig,
) -> ScoreResult:
    """The decayed score at ``now_ms`` of accepted samples (``ts_ms`` ascending, non-empty)."""
    mean, n = decayed_mean(
        np.asarray(ts_ms, dtype=np.float64),
        np.asarray(instants, dtype=np.float64),
        now_ms,
        config.decay_rate_per_s,
        config.history_s,
    )
    last_ts = ts_ms[-1]
    return ScoreResult(
        score=0.0 if math.isnan(mean) else mean,
        components=components,
        samples_in_window=n,
        stale=(now_ms - last_ts) > config.stale_after_s * 1000,
        ts_ms=last_ts,
    )
