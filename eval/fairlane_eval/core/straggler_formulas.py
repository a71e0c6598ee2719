"""Closed forms for stragglers (pure): what a barrier costs a job, and what a coefficient
of variation alone says about its slowest worker. :mod:`fairlane_eval.core.straggler`
checks them against Alibaba PAI's per-worker times."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

__all__ = [
    "cov_ceiling",
    "max_over_mean_bounds",
    "mean_step",
    "one_straggler_cov",
    "one_straggler_ratio",
    "slowest_over_median",
]


def slowest_over_median(worker_times: Sequence[float]) -> float:
    """``max(t) / median(t)``: how much longer the job waits at a barrier than its median
    worker needs. 1.0 = no straggler."""
    t = np.asarray(worker_times, dtype=np.float64)
    return float(t.max() / np.median(t))


def mean_step(worker_times: Sequence[float]) -> float:
    """The softer alternative, ``mean(t)``: a job that does not wait for its slowest
    worker (asynchronous updates, or work that rebalances perfectly)."""
    return float(np.mean(worker_times))


def cov_ceiling(workers: int, ddof: int = 1) -> float:
    """The largest CoV ``n`` non-negative times can have: ``sqrt(n (n-1) / (n - ddof))``
    (one worker takes all the time). 3.0 for ten workers with the README's 1/N standard
    deviation; sqrt(10) = 3.162 with the sample (N-1) one."""
    return math.sqrt(workers * (workers - 1) / (workers - ddof))


def max_over_mean_bounds(cov: float, workers: int, ddof: int = 1) -> tuple[float, float]:
    """What a CoV alone says about the slowest worker, with no assumption on the shape:

    ``1 + c / sqrt(n - 1)  <=  max / mean  <=  1 + c * sqrt(n - 1)``, ``c = sigma / mu``
    with the 1/N ``sigma`` (a ``ddof`` CoV is rescaled by ``sqrt((n - ddof) / n)``).
    The upper bound is one slow worker and n - 1 equal ones; the lower, n - 1 equal slow
    workers and one fast one.
    """
    c = cov * math.sqrt((workers - ddof) / workers)
    root = math.sqrt(workers - 1)
    return 1.0 + c / root, 1.0 + c * root


def one_straggler_cov(ratio: float, workers: int, ddof: int = 1) -> float:
    """The CoV of ``n - 1`` equal workers and one ``ratio`` x slower:

    ``(r - 1) * sqrt((n - 1) / (n (n - ddof))) * n / (n - 1 + r)``.
    """
    n = workers
    return (ratio - 1) * math.sqrt((n - 1) / (n * (n - ddof))) * n / (n - 1 + ratio)


def one_straggler_ratio(cov: float, workers: int, ddof: int = 1) -> float:
    """The inverse of :func:`one_straggler_cov`: the single straggler's ``r`` that would
    give ``cov``, ``1 + c n / (a n - c)`` with ``a = sqrt((n - 1) / (n (n - ddof)))``;
    ``inf`` at or above :func:`cov_ceiling`."""
    n = workers
    a = math.sqrt((n - 1) / (n * (n - ddof)))
    return math.inf if cov >= a * n else 1.0 + cov * n / (a * n - cov)
