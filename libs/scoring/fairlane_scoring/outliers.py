"""The causal Hampel spike filter, applied per component to each new sample."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from fairlane_scoring.components import Components
from fairlane_scoring.config import COMPONENTS, LOAD_COMPONENTS

__all__ = ["MAD_TO_SIGMA", "filter_components", "hampel"]

#: 1 / Phi^-1(3/4): the median absolute deviation times this estimates a normal sigma.
MAD_TO_SIGMA = 1.4826

_FIRST_LOAD = COMPONENTS.index(LOAD_COMPONENTS[0])


def hampel(window: Sequence[float], n_sigma: float, min_scale: float) -> float:
    """The newest value x = window[-1], or the window's median m when x is an outlier:

        m = median(window),  s = max(1.4826 * median(|window - m|), min_scale)
        hampel = m if |x - m| > n_sigma * s else x

    Causal: the window holds only x and the values before it. ``min_scale`` keeps a
    perfectly flat history (MAD = 0) from treating every small wobble as a spike.
    """
    x = window[-1]
    m = statistics.median(window)
    s = max(MAD_TO_SIGMA * statistics.median(abs(v - m) for v in window), min_scale)
    return m if abs(x - m) > n_sigma * s else x


def filter_components(
    history: Sequence[tuple[int, Components]],
    load_since_ms: float,
    n_sigma: float,
    min_scale: float,
) -> Components:
    """Hampel-filter the newest sample's components, each over its own values in
    ``history`` (``(ts_ms, components)``, the causal window, newest last).

    Load components are windowed only over samples at or after ``load_since_ms``: when
    Fairlane's placement ends, the load history restarts, so the first idle sample after a
    busy job is not mistaken for a spike. A component the newest sample does not report
    stays None; earlier samples that lack it are left out of its window.
    """
    newest = history[-1][1]
    filtered: list[float | None] = []
    for i, value in enumerate(newest):
        if value is None:
            filtered.append(None)
            continue
        since = load_since_ms if i >= _FIRST_LOAD else -math.inf
        window = [c[i] for ts, c in history[:-1] if ts >= since and c[i] is not None]
        filtered.append(hampel([*window, value], n_sigma, min_scale))  # type: ignore[list-item]
    return tuple(filtered)
