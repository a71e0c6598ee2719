"""Does the live share agree with the offline prediction (pure)? The predicted share must
lie inside the 95 % Wilson interval of the live share; docs/evaluation-live.md says why
that tolerance."""

from __future__ import annotations

import math
from dataclasses import dataclass

from fairlane_eval.core.live_prediction import Prediction, Share

__all__ = ["Agreement", "agreement", "wilson_interval"]

_Z95 = 1.959964  # two-sided 95 % normal quantile


def wilson_interval(k: int, n: int, z: float = _Z95) -> tuple[float, float]:
    """The Wilson score interval of a binomial proportion ``k / n``::

        centre = (p + z^2 / 2n) / (1 + z^2 / n)
        half   = z / (1 + z^2 / n) x sqrt(p (1 - p) / n + z^2 / 4n^2)

    Unlike p +- z sqrt(p(1-p)/n) it stays inside [0, 1] and is not empty at k = 0 or n."""
    if n <= 0:
        return 0.0, 1.0
    p = k / n
    denominator = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denominator
    half = z / denominator * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n))
    return max(0.0, centre - half), min(1.0, centre + half)


@dataclass(frozen=True)
class Agreement:
    policy: str
    live: Share
    predicted: Prediction
    interval: tuple[float, float]  # 95 % Wilson interval of the live share

    @property
    def agrees(self) -> bool:
        low, high = self.interval
        return low - 1e-12 <= self.predicted.share <= high + 1e-12


def agreement(live: Share, predicted: Prediction, z: float = _Z95) -> Agreement:
    """Does the live share agree with the prediction? Yes when the predicted share lies
    in the live share's Wilson interval: the live run is one draw of ``placements``
    placements, and the prediction is not rejected at the 5 % level."""
    return Agreement(
        predicted.policy, live, predicted, wilson_interval(live.on_throttled, live.placements, z)
    )
