"""Cross-job learning: what one job class's step cost usually is, across jobs (pure).

Within a job, a rank's GPU is judged against the job's other ranks
(:func:`fairlane_scoring.learned_speed.rank_observations`), which leaves a one-GPU job
teaching nothing, a job wholly on one slow node looking like a costly job, and a job
with half its ranks slow ambiguous. Jobs of one class tell what the class's step cost
usually is: each job's **normalised cost** (its ranks' median of
``log t + log v + log s^``: the compute time per step times the model's catalogue speed
and the GPU's learned speed, i.e. the time on a typical GPU of speed 1.0) is kept for the
``jobs`` most recently reported jobs, forgotten after ``max_age_s``. The class's
reference for a job is the median of the *other* jobs' costs, its spread 1.4826 x their
MAD (a normal's sigma, robust to a few odd jobs).

A tight label ("resnet50-bs64") has a small spread and pins a job's cost well; a loose
one ("compute-bound", whose jobs differ by e-fold) barely at all. How the reference and
the job's own ranks are combined into each rank's observation:
:func:`fairlane_scoring.learned_speed.rank_observations`.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

__all__ = [
    "ClassReference",
    "JobCost",
    "ReferenceConfig",
    "combined_observations",
    "reference_for",
    "reports_of",
    "with_job_cost",
]

#: A normal's sigma is 1.4826 x its median absolute deviation.
MAD_TO_SIGMA = 1.4826


@dataclass(frozen=True)
class ReferenceConfig:
    """How a class's reference is kept: bounded by jobs and by age."""

    jobs: int = 64  # the most recently reported jobs kept per class
    max_age_s: float = 30 * 86_400.0  # a job not reported for 30 days is dropped
    min_jobs: int = 16  # other jobs needed before the reference says anything
    sigma_floor: float = 0.01  # a spread below 1 % is not trusted

    def __post_init__(self) -> None:
        if self.jobs < 1 or self.min_jobs < 1:
            raise ValueError("jobs and min_jobs must be >= 1")
        if self.min_jobs > self.jobs:
            raise ValueError("min_jobs must not exceed jobs (the reference would never speak)")
        if self.max_age_s <= 0 or self.sigma_floor <= 0:
            raise ValueError("max_age_s and sigma_floor must be > 0")


@dataclass(frozen=True)
class JobCost:
    """One job's latest normalised step cost (log seconds per step on a speed-1.0 GPU)
    and how many of its reports were learned."""

    job: str
    log_cost: float
    updated_ms: int
    reports: int = 1


@dataclass(frozen=True)
class ClassReference:
    """The recent jobs' costs of one class, oldest first (at most ``jobs`` of them)."""

    costs: tuple[JobCost, ...] = ()


def with_job_cost(
    reference: ClassReference, cost: JobCost, config: ReferenceConfig
) -> ClassReference:
    """``reference`` with ``cost`` as its job's newest (one more report of the job),
    the expired and the oldest beyond ``jobs`` dropped."""
    horizon = cost.updated_ms - config.max_age_s * 1000.0
    kept = [c for c in reference.costs if c.job != cost.job and c.updated_ms >= horizon]
    counted = replace(cost, reports=reports_of(reference, cost.job) + 1)
    return ClassReference((*kept, counted)[-config.jobs :])


def reports_of(reference: ClassReference, job: str) -> int:
    """How many of ``job``'s reports ``reference`` has learned (0: a new job)."""
    return next((c.reports for c in reference.costs if c.job == job), 0)


def reference_for(
    reference: ClassReference | None, job: str, now_ms: int, config: ReferenceConfig
) -> tuple[float, float] | None:
    """(median, sigma) of the other jobs' costs not expired at ``now_ms``; None with
    fewer than ``min_jobs``.

    The sigma is ``1.4826 x MAD x (1 + 2 x 1.17 / sqrt(k))`` over the ``k`` others, at
    least ``sigma_floor``: the MAD's estimate of a normal's sigma has a relative standard
    error of about 1.17 / sqrt(k), and a spread taken too tight from a few jobs would let
    one odd job teach its GPUs a wrong speed, so its upper bound is used."""
    if reference is None:
        return None
    horizon = now_ms - config.max_age_s * 1000.0
    others = np.array(
        [c.log_cost for c in reference.costs if c.job != job and c.updated_ms >= horizon]
    )
    if others.size < config.min_jobs:
        return None
    median = float(np.median(others))
    mad = float(np.median(np.abs(others - median)))
    sigma = MAD_TO_SIGMA * mad * (1.0 + 2.0 * 1.17 / np.sqrt(others.size))
    return median, max(config.sigma_floor, float(sigma))


def combined_observations(
    own: npt.NDArray[np.float64],
    peer_costs: npt.NDArray[np.float64] | None,
    peer_variances: npt.NDArray[np.float64] | None,
    reference: tuple[float, float],
    *,
    noise_sigma: float,
    repeat: int = 1,
) -> list[tuple[float, float]]:
    """Each rank's (observation of its GPU's log speed, weight factor), its job's cost
    estimated from the peers and the class together.

    With ``own_r = log t_r + log v_r``, the peers' estimate of the job's cost ``p_r``
    (variance ``P_r``; none for a one-rank job) and the class's reference ``(m, S)``:

        c_r = (p_r / P_r + m / S^2) / (1 / P_r + 1 / S^2),  C_r = 1 / (1 / P_r + 1 / S^2)
        x_r = c_r - own_r,  factor_r = (P_r + n^2) / (C_r + n^2)

    (``n`` = ``noise_sigma``, the rank's own noise). The factor scales the report's
    weight by how much more precise the observation is than the peers' alone: 1 for a
    loose class, more for a tight one. A one-rank job has no peers: ``c = m``, its factor
    ``n^2 / (S^2 + n^2)`` (a report worth one window of noise ``n`` counts 1), so a loose
    class's one-GPU job weighs almost nothing.

    The job's cost error is the same in each of its reports, so the class speaks of a
    job about once, not once a window: the ``repeat``-th report of a job keeps
    ``1 / repeat^2`` of what the class adds to the factor (the sum is pi^2 / 6), the
    peers' share whole."""
    median, sigma = reference
    ref_precision = 1.0 / sigma**2
    noise = noise_sigma**2
    if peer_costs is None or peer_variances is None:
        factor = noise / (sigma**2 + noise) / repeat**2
        return [(median - float(o), factor) for o in own]
    precision = 1.0 / peer_variances + ref_precision
    cost = (peer_costs / peer_variances + median * ref_precision) / precision
    gain = (peer_variances + noise) / (1.0 / precision + noise) - 1.0
    factors = 1.0 + gain / repeat**2
    return [(float(c - o), float(f)) for c, o, f in zip(cost, own, factors, strict=True)]
