"""Per-GPU speed variability among GPUs of one model, drawn from measurements.

Identical GPUs are not equally fast (manufacturing spread, cooling, power delivery).
The distribution is PAL's measured one (336 V100s, ResNet-50; see ``data/README.md``),
not a made-up Gaussian: a draw is the empirical quantile function of the measured
relative speeds at a uniform random point (linear interpolation between measurements).
"""

from __future__ import annotations

import csv
import functools
import io
from importlib import resources

import numpy as np

__all__ = ["measured_speeds", "sample_speeds"]

_DATA = "pal_resnet50_v100_speed.csv"


@functools.cache
def measured_speeds() -> tuple[float, ...]:
    """PAL's per-GPU relative speeds (1.0 = the median GPU), sorted ascending."""
    text = resources.files("fairlane_sim").joinpath("data", _DATA).read_text()
    return tuple(sorted(float(row["relative_speed"]) for row in csv.DictReader(io.StringIO(text))))


def sample_speeds(rng: np.random.Generator, n: int) -> np.ndarray:
    """``n`` relative speeds drawn from the measured distribution."""
    speeds: np.ndarray = np.quantile(np.asarray(measured_speeds()), rng.random(n))
    return speeds
