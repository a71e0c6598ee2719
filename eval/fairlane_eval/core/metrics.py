"""What a run measured: completion times, waiting, stragglers, fairness (pure).

Finish-time fairness follows Themis (NSDI'20): rho = T_shared / T_independent, where
T_independent is the time the job would take on an exclusive 1/N share of the cluster,
N the average number of jobs present (running or waiting) during its life
(:func:`finish_time_fairness` has the formula). rho <= 1 is fair; the worst rho and the
worst namespace's mean rho are what a fairness policy bounds.

GPU-hours lost to stragglers: per job, sum over time of its GPUs x (1 - rate / r_median)
while below, r_median its rate on median GPUs (speed 1.0) of the models it got. So both
persistent slowness (a GPU the variability data puts at 0.95 costs its gang 5 % of its
whole run) and fail-slow episodes count; the model itself does not (a K80 is slow, not
a straggler).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np
import numpy.typing as npt

from fairlane_eval.core.sim_types import JobOutcome, SimResult

__all__ = ["METRICS", "Summary", "contention", "finish_time_fairness", "summarise"]

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Summary:
    policy: str
    jobs: int
    finished: int
    mean_jct_s: float
    median_jct_s: float
    p95_jct_s: float
    makespan_s: float
    mean_queue_s: float
    threshold_queue_share: float  # of all queueing, the part the health filter caused
    lost_gpu_h: float  # GPU-hours run below the job's rate on median GPUs of its models
    slow_placement_share: float  # placed GPUs slower than 0.9 x their model's median
    utilisation: float  # GPU-busy time / (GPUs x makespan)
    mean_ftf: float  # Themis finish-time fairness, mean over jobs
    max_ftf: float
    worst_namespace_ftf: float  # the highest per-namespace mean rho

    def as_dict(self) -> dict[str, float | int | str]:
        return asdict(self)


#: Metric name -> (label, unit, lower is better).
METRICS: dict[str, tuple[str, str, bool]] = {
    "mean_jct_s": ("mean JCT", "s", True),
    "median_jct_s": ("median JCT", "s", True),
    "p95_jct_s": ("p95 JCT", "s", True),
    "makespan_s": ("makespan", "s", True),
    "mean_queue_s": ("mean queueing", "s", True),
    "threshold_queue_share": ("queueing due to the threshold", "share", True),
    "lost_gpu_h": ("GPU-hours lost to stragglers", "GPU-h", True),
    "slow_placement_share": ("placed on a GPU < 0.9 x median", "share", True),
    "utilisation": ("utilisation", "share", False),
    "mean_ftf": ("finish-time fairness, mean", "rho", True),
    "max_ftf": ("finish-time fairness, worst job", "rho", True),
    "worst_namespace_ftf": ("finish-time fairness, worst namespace", "rho", True),
}


def contention(arrivals: FloatArray, ends: FloatArray) -> FloatArray:
    """Each job's average number of jobs present over its own [arrival, end]."""
    times = np.concatenate([arrivals, ends])
    steps = np.concatenate([np.ones_like(arrivals), -np.ones_like(ends)])
    order = np.argsort(times, kind="stable")
    times, present = times[order], np.cumsum(steps[order])
    # Area under present(t) from the first event to each event time.
    area = np.concatenate([[0.0], np.cumsum(present[:-1] * np.diff(times))])

    def area_at(t: FloatArray) -> FloatArray:
        i = np.searchsorted(times, t, side="right") - 1
        result: FloatArray = area[i] + present[i] * (t - times[i])
        return result

    span = np.maximum(ends - arrivals, 1e-9)
    average: FloatArray = (area_at(ends) - area_at(arrivals)) / span
    return np.maximum(average, 1.0)


def finish_time_fairness(done: Sequence[JobOutcome], gpus: int) -> FloatArray:
    """Each finished job's rho = T_shared / T_independent (Themis), on ``gpus`` GPUs:

        T_shared      = end - arrival
        T_independent = T_ideal x max(1, g N / G)

    g the job's GPUs, G = ``gpus``, N its average contention (:func:`contention`: a job
    of g GPUs on G GPUs shared by N jobs gets min(g, G/N) of them), and T_ideal its run
    time alone on its ideal allocation (``JobOutcome.ideal_s``: median GPUs of the
    fastest models that can host it, no episode). T_ideal is the same under every
    policy: it does not depend on the GPUs the policy gave the job, so a policy that puts
    a job on slow or throttled GPUs is charged for it (against its own GPUs the job would
    look fair). N, as Themis defines it, is measured in the shared run itself.
    """
    arrivals = np.array([o.job.arrival_s for o in done], dtype=np.float64)
    ends = np.array([o.end_s for o in done], dtype=np.float64)
    share = contention(arrivals, ends)
    g = np.array([o.job.gpus for o in done], dtype=np.float64)
    independent = np.array([o.ideal_s for o in done]) * np.maximum(1.0, g * share / gpus)
    rho: FloatArray = (ends - arrivals) / independent
    return rho


def summarise(result: SimResult) -> Summary:
    done = [o for o in result.outcomes if o.end_s is not None and o.start_s is not None]
    placed = [o for o in result.outcomes if o.start_s is not None]
    if not done:
        nan = math.nan
        return Summary(result.policy, len(result.outcomes), 0, *([nan] * 12))
    jct = np.array([o.jct_s for o in done], dtype=np.float64)
    queue = np.array([o.queued_s for o in placed], dtype=np.float64)
    first = min(o.job.arrival_s for o in result.outcomes)
    last = max(o.end_s for o in done if o.end_s is not None)
    makespan = last - first
    busy = sum(o.job.gpus * ((o.end_s or result.end_s) - (o.start_s or 0)) for o in placed)
    rho = finish_time_fairness(done, result.gpus)
    per_ns: dict[str, list[float]] = defaultdict(list)
    for o, r in zip(done, rho, strict=True):
        per_ns[o.job.namespace].append(float(r))
    held = sum(o.held_s for o in result.outcomes)
    queued = float(queue.sum())
    return Summary(
        policy=result.policy,
        jobs=len(result.outcomes),
        finished=len(done),
        mean_jct_s=float(jct.mean()),
        median_jct_s=float(np.median(jct)),
        p95_jct_s=float(np.percentile(jct, 95)),
        makespan_s=makespan,
        mean_queue_s=float(queue.mean()),
        threshold_queue_share=held / queued if queued > 0 else 0.0,
        lost_gpu_h=sum(o.lost_gpu_s for o in result.outcomes) / 3600,
        slow_placement_share=sum(o.slow_gpus for o in placed) / sum(o.job.gpus for o in placed),
        utilisation=busy / (result.gpus * makespan) if makespan > 0 else 0.0,
        mean_ftf=float(rho.mean()),
        max_ftf=float(rho.max()),
        worst_namespace_ftf=max(float(np.mean(v)) for v in per_ns.values()),
    )
