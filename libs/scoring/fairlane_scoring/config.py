"""Every knob of the score, with its default, in one place (docs/scoring.md explains them)."""

from __future__ import annotations

import functools
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

__all__ = [
    "COMPONENTS",
    "DEFAULT_WEIGHTS",
    "HEALTH_COMPONENTS",
    "LOAD_COMPONENTS",
    "ScoreConfig",
]

#: Properties of the GPU itself: they count whoever runs on it.
HEALTH_COMPONENTS = ("clock", "thermal")
#: What a tenant does on it: masked while Fairlane has the GPU allocated.
LOAD_COMPONENTS = ("compute", "memory", "bandwidth", "power")
#: Every component, in the order the state and the records keep them.
COMPONENTS = HEALTH_COMPONENTS + LOAD_COMPONENTS

DEFAULT_WEIGHTS: Mapping[str, float] = MappingProxyType(
    {
        # Health family. On PAL's SGEMM data the relative speed of a V100 is 1.09 x its
        # SM-clock ratio (r = 0.95); temperature adds little once the clock is known.
        "clock": 8.0,
        "thermal": 1.0,
        # Load family: compute (SM activity) weighted highest, as DESIGN.md asks.
        "compute": 4.0,
        "memory": 2.0,
        "bandwidth": 1.0,
        "power": 1.0,
    }
)


@dataclass(frozen=True)
class ScoreConfig:
    """Score parameters. Times in seconds."""

    weights: Mapping[str, float] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    recent_weight: float = 0.70  # share of the weight carried by the last `recent_window_s`
    recent_window_s: float = 300.0
    history_s: float = 600.0  # samples older than this do not count
    thermal_margin_c: float = 20.0  # headroom is full this far below the slowdown temperature
    hampel_window: int = 5  # samples in the causal median window, the current one included
    hampel_n_sigma: float = 3.0  # outlier: further than this many robust sigmas from the median
    hampel_min_scale: float = 0.05  # floor of the robust sigma (component units, 0..1)
    interval_s: float = 30.0  # the agents' collection interval
    stale_after_intervals: float = 3.0
    threshold: float = 0.65
    emit_epsilon: float = 0.01  # emit when the score moves more than this...
    heartbeat_s: float = 60.0  # ...or at least this often

    def __post_init__(self) -> None:
        if not 0 < self.recent_weight < 1:
            raise ValueError("recent_weight must be in (0, 1)")
        if self.recent_window_s <= 0 or self.history_s < self.recent_window_s:
            raise ValueError("need 0 < recent_window_s <= history_s")
        if set(self.weights) != set(COMPONENTS):
            raise ValueError(f"weights must name exactly {COMPONENTS}")
        if any(w < 0 or not math.isfinite(w) for w in self.weights.values()):
            raise ValueError("weights must be finite and non-negative")
        if self.hampel_window < 1 or self.hampel_n_sigma <= 0 or self.hampel_min_scale < 0:
            raise ValueError("need hampel_window >= 1, hampel_n_sigma > 0, hampel_min_scale >= 0")

    @functools.cached_property
    def component_weights(self) -> tuple[float, ...]:
        """The weights in COMPONENTS order (what the instant score takes)."""
        return tuple(self.weights[c] for c in COMPONENTS)

    @property
    def decay_rate_per_s(self) -> float:
        """k in w = exp(-k * age): ``recent_weight`` of an unbounded history lies in the
        last ``recent_window_s``, i.e. exp(-k * recent_window_s) = 1 - recent_weight."""
        return -math.log(1.0 - self.recent_weight) / self.recent_window_s

    @property
    def stale_after_s(self) -> float:
        return self.interval_s * self.stale_after_intervals
