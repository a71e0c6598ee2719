"""Time decay: weights by sample age in seconds, not by sample index."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

__all__ = ["decay_weights", "decayed_mean", "in_history"]

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]


def in_history(ages_s: FloatArray, history_s: float) -> BoolArray:
    """0 <= age <= history_s: the samples that count (none from the future)."""
    return (ages_s >= 0) & (ages_s <= history_s)


def decay_weights(ages_s: FloatArray, rate_per_s: float, history_s: float) -> FloatArray:
    """w = exp(-rate * age) for 0 <= age <= history_s, else 0."""
    inside = in_history(ages_s, history_s)
    return np.where(inside, np.exp(-rate_per_s * np.clip(ages_s, 0, None)), 0.0)


def decayed_mean(
    ts_ms: FloatArray, values: FloatArray, now_ms: int, rate_per_s: float, history_s: float
) -> tuple[float, int]:
    """sum(w_i v_i) / sum(w_i) with w from :func:`decay_weights`; also the number of samples
    inside the window. (nan, 0) when no sample is inside it."""
    weights = decay_weights((now_ms - ts_ms) / 1000.0, rate_per_s, history_s)
    n = int(np.count_nonzero(weights))
    if n == 0:
        return float("nan"), 0
    return float(np.dot(weights, values) / weights.sum()), n
