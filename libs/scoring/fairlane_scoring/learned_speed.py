"""Each GPU's persistent speed per job class, learned from what running jobs report.

NVML cannot see a GPU that is healthy by every counter and still runs a job at 0.9x of
its peers (PAL, SC'24). The jobs can: each rank reports its compute-only time per step,
collective waits excluded (in synchronous training every rank sees the same step time, so
step time alone cannot tell GPUs apart). Pure: no I/O; time is an argument.

The model. Rank r of job j runs on GPU g(r) of model m and reports ``t_jr``, its compute
time per step over a window. Then

    log t_jr = log c_j - log v_m,c - log s_g,c + noise

with ``c_j`` the job's own step cost (unknown), ``v_m,c`` the model's catalogue speed for
the job's class c (given), and ``s_g,c`` the GPU's relative speed against its model's
peers (1.0 = typical), the quantity learned here.

One report teaches each rank's GPU one observation of ``log s_g,c``:

    x_r = median over the other ranks q of (log t_jq + log v_q + log s^_q) - log t_jr - log v_r

The other ranks' times, corrected by what is already known of their GPUs, stand for the
job's cost: the median keeps a few slow ranks from moving it (robust within the job), the
correction keeps a job placed wholly on known-slow GPUs from being taken for a costly job
(consistent across jobs). A one-rank job teaches nothing, since its cost is unknown.

Cross-job learning (``LearnerConfig.cross_job``, off by default: docs/evaluation.md
says why) adds what the job's class says its cost usually is
(:mod:`fairlane_scoring.class_reference`): the job's cost is then the peers' estimate and
the class's reference weighted by precision, so a one-GPU job, a job wholly on one slow
node and a job with half its ranks slow teach something when the class is tight.

Each (GPU, class) keeps a running mean and variance of its observations, weighted by
job-minutes (one rank reporting for 60 s weighs 1) and forgetting with wall time
(half-life ``half_life_s``, a day). A two-sided CUSUM of the standardised residuals
against that mean watches for a change: each residual counts at most ``change_z_cap``
sigmas, so one wild report cannot raise the alarm, while a GPU that degraded or was
repaired does within a few reports; the statistic then restarts from the new
observations, and a GPU that recovers is trusted again within minutes, not days.

The estimate is the observations' mean shrunk toward a prior by precision (a normal prior
of spread ``prior_sigma`` against the mean's standard error): the NVML prior
(:func:`clock_prior`, the GPU's SM clock while busy against its model's fleet median, which
tracks compute-bound slowness: r = -0.94 on SGEMM in PAL's Longhorn data), else 1.0. With
little data the prior dominates; thirty job-minutes of consistent reports outweigh it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from fairlane_scoring.class_reference import (
    ClassReference,
    JobCost,
    ReferenceConfig,
    combined_observations,
    reference_for,
    reports_of,
    with_job_cost,
)

__all__ = [
    "LearnedSpeed",
    "LearnerConfig",
    "ProgressReport",
    "RankReport",
    "Running",
    "SpeedState",
    "clock_prior",
    "estimate",
    "leave_one_out_medians",
    "observe",
    "observe_across",
    "observe_all",
    "peer_relative",
    "rank_observations",
]


@dataclass(frozen=True)
class LearnerConfig:
    """Learner parameters. Weights are in job-minutes (one rank reporting for 60 s = 1)."""

    prior_sigma: float = 0.10  # how far (log speed) a GPU may be from its prior, a priori
    half_life_s: float = 86_400.0  # forget slowly: a day
    noise_sigma: float = 0.05  # the observations' spread (log) assumed before many come...
    noise_pseudo_weight: float = 2.0  # ...worth this many job-minutes in the pooled spread
    noise_floor: float = 0.01  # a residual spread below 1 % is not trusted
    settled_weight: float = 5.0  # job-minutes before outliers are clipped and changes watched
    clip_sigmas: float = 4.0  # an observation counts at most this many sigmas from the mean
    change_z_cap: float = 4.0  # CUSUM: a residual counts at most this many sigmas...
    change_drift: float = 1.0  # ...less this allowance per report...
    change_alarm: float = 8.0  # ...and a change is called when the sum passes this
    max_log_ratio: float = math.log(4.0)  # a rank 4x off its peers is not a speed
    max_window_s: float = 600.0  # one report weighs at most ten job-minutes a rank
    clock_exponent: float = 1.09  # PAL SGEMM: relative speed = 1.09 x SM-clock ratio
    cross_job: ReferenceConfig | None = None  # None: learn within each job only

    def __post_init__(self) -> None:
        positive = ("prior_sigma", "half_life_s", "noise_sigma", "noise_floor", "change_alarm")
        for name in (*positive, "max_window_s"):
            if getattr(self, name) <= 0:
                raise ValueError(f"{name} must be > 0")
        if self.change_z_cap <= self.change_drift:
            raise ValueError("change_z_cap must exceed change_drift (else no change is ever seen)")


@dataclass(frozen=True)
class RankReport:
    """One rank's window: its GPU, compute-only seconds per step, the model's speed."""

    gpu: str
    compute_s_per_step: float
    model_speed: float = 1.0


@dataclass(frozen=True)
class ProgressReport:
    """One job's window: its class, how long the window was, every rank in it, and
    which job it is (its placement; cross-job learning needs it, "" for none)."""

    job_class: str
    window_s: float
    ranks: tuple[RankReport, ...]
    job: str = ""


@dataclass(frozen=True)
class Running:
    """A forgetting weighted mean and variance of log-speed observations (West's update)."""

    weight: float = 0.0
    mean: float = 0.0
    m2: float = 0.0  # weighted sum of squared deviations
    updated_ms: int = 0

    def decayed(self, now_ms: int, half_life_s: float) -> Running:
        """The same statistic, its weight forgotten by the time since its last update."""
        age_s = max(0.0, (now_ms - self.updated_ms) / 1000.0)
        factor = 0.5 ** (age_s / half_life_s)
        return replace(self, weight=self.weight * factor, m2=self.m2 * factor, updated_ms=now_ms)

    def add(self, x: float, weight: float) -> Running:
        """``x`` with ``weight`` added (weights already decayed to now)."""
        total = self.weight + weight
        delta = x - self.mean
        mean = self.mean + delta * weight / total
        return replace(self, weight=total, mean=mean, m2=self.m2 + weight * delta * (x - mean))

    def sigma(self, config: LearnerConfig) -> float:
        """The observations' spread (log speed), pooled with the assumed one while they are
        few, at least ``noise_floor``."""
        pseudo = config.noise_pseudo_weight
        variance = (max(self.m2, 0.0) + pseudo * config.noise_sigma**2) / (self.weight + pseudo)
        return max(config.noise_floor, math.sqrt(variance))


@dataclass(frozen=True)
class SpeedState:
    """What is known of one GPU under one job class."""

    stats: Running = Running()
    cusum_up: float = 0.0  # evidence (sigmas) that the GPU became faster...
    cusum_down: float = 0.0  # ...or slower than its mean says
    reports: int = 0
    changes: int = 0  # times the GPU was found to have changed


@dataclass(frozen=True)
class LearnedSpeed:
    """A GPU's speed for a class: the estimate, its 95 % interval and how much stands
    behind it (confidence = the reports' share of the estimate's precision)."""

    speed: float
    low: float
    high: float
    reports: int
    weight: float
    confidence: float


def clock_prior(
    busy_clock_mhz: float | None, peer_median_mhz: float | None, config: LearnerConfig
) -> float:
    """The NVML prior (log speed): ``clock_exponent x log(busy clock / peers' median)``.

    The SM clock while busy, against the same model's fleet median, tracks compute-bound
    slowness (PAL Longhorn SGEMM: r = -0.94 with kernel time; speed = 1.09 x the clock
    ratio). Without either clock the prior is 1.0 (log 0)."""
    if not busy_clock_mhz or not peer_median_mhz or busy_clock_mhz <= 0 or peer_median_mhz <= 0:
        return 0.0
    return config.clock_exponent * math.log(busy_clock_mhz / peer_median_mhz)


def leave_one_out_medians(values: Sequence[float]) -> npt.NDArray[np.float64]:
    """For each element, the median of all the others (n >= 2), in O(n log n).

    With the values sorted, removing the element at sorted position k shifts the
    positions above k down by one, so the others' median is read off the sorted array."""
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    if n < 2:
        raise ValueError("a leave-one-out median needs at least two values")
    order = np.argsort(x, kind="stable")
    ranked = x[order]
    position = np.empty(n, dtype=np.intp)
    position[order] = np.arange(n)

    def others_at(i: int) -> npt.NDArray[np.float64]:  # the i-th of the n-1 others, each
        picked: npt.NDArray[np.float64] = ranked[np.where(i < position, i, i + 1)]
        return picked

    rest = n - 1
    if rest % 2:
        return others_at(rest // 2)
    return (others_at(rest // 2 - 1) + others_at(rest // 2)) / 2.0


def rank_observations(
    report: ProgressReport, known_log_speeds: Sequence[float], config: LearnerConfig
) -> list[float | None]:
    """Each rank's observation of its GPU's log speed (module docstring), None where the
    report cannot say: a one-rank job, a non-positive time, or a ratio beyond
    ``max_log_ratio`` (a rank stalled by something other than its GPU)."""
    n = len(report.ranks)
    if n < 2:
        return [None] * n
    times = np.array([r.compute_s_per_step for r in report.ranks], dtype=np.float64)
    if not np.all(np.isfinite(times) & (times > 0)):
        return [None] * n
    own = np.log(times) + np.log([r.model_speed for r in report.ranks])
    job_cost = leave_one_out_medians(own + np.asarray(known_log_speeds, dtype=np.float64))
    observed = job_cost - own
    return [float(x) if abs(x) <= config.max_log_ratio else None for x in observed]


def _observe_one(
    state: SpeedState, x: float, weight: float, now_ms: int, config: LearnerConfig
) -> SpeedState:
    stats = state.stats.decayed(now_ms, config.half_life_s)
    up, down, changes = state.cusum_up, state.cusum_down, state.changes
    if stats.weight >= config.settled_weight:
        sigma = stats.sigma(config)
        z = max(-config.change_z_cap, min(config.change_z_cap, (x - stats.mean) / sigma))
        up = max(0.0, up + z - config.change_drift)
        down = max(0.0, down - z - config.change_drift)
        if max(up, down) > config.change_alarm:  # the GPU changed: start again from here
            stats, up, down, changes = Running(updated_ms=now_ms), 0.0, 0.0, changes + 1
        else:  # a lone outlier moves the mean only so far
            reach = config.clip_sigmas * sigma
            x = min(max(x, stats.mean - reach), stats.mean + reach)
    return SpeedState(stats.add(x, weight), up, down, state.reports + 1, changes)


def observe(
    states: Mapping[tuple[str, str], SpeedState],
    report: ProgressReport,
    now_ms: int,
    config: LearnerConfig,
    priors: Mapping[str, float] | None = None,
) -> dict[tuple[str, str], SpeedState]:
    """The new states of the (GPU, class) pairs this report teaches something about,
    from within the job only.

    ``priors``: log-speed priors by GPU (:func:`clock_prior`) for GPUs not learned yet."""
    return _learn(states, None, report, now_ms, config=config, priors=priors or {})[0]


def observe_across(
    states: Mapping[tuple[str, str], SpeedState],
    reference: ClassReference | None,
    report: ProgressReport,
    now_ms: int,
    *,
    config: LearnerConfig,
    priors: Mapping[str, float] | None = None,
) -> tuple[dict[tuple[str, str], SpeedState], ClassReference | None]:
    """:func:`observe` with the job's class's reference (``config.cross_job``; without
    it, or for a report that names no job, exactly :func:`observe`), and the reference
    with this job's cost in it (None: unchanged)."""
    return _learn(
        states, reference or ClassReference(), report, now_ms, config=config, priors=priors or {}
    )


def _learn(
    states: Mapping[tuple[str, str], SpeedState],
    reference: ClassReference | None,
    report: ProgressReport,
    now_ms: int,
    *,
    config: LearnerConfig,
    priors: Mapping[str, float],
) -> tuple[dict[tuple[str, str], SpeedState], ClassReference | None]:
    keys = [(rank.gpu, report.job_class) for rank in report.ranks]
    known = [_known(states.get(key), priors.get(key[0], 0.0), now_ms, config) for key in keys]
    # A day-long window is one measurement, not 1,440: it must not drown the others.
    weight = min(max(report.window_s, 0.0), config.max_window_s) / 60.0
    updated: dict[tuple[str, str], SpeedState] = {}
    if weight <= 0:
        return updated, None
    across = config.cross_job if report.job and reference is not None else None
    if across is None:
        speeds = [speed for speed, _ in known]
        observed = [
            None if x is None else (x, 1.0) for x in rank_observations(report, speeds, config)
        ]
        new_reference = None
    else:
        assert reference is not None
        observed, new_reference = _observe_across(reference, report, known, now_ms, config)
    for key, seen in zip(keys, observed, strict=True):
        if seen is not None and key not in updated:
            x, factor = seen
            state = states.get(key, SpeedState())
            updated[key] = _observe_one(state, x, weight * factor, now_ms, config)
    return updated, new_reference


def _observe_across(
    reference: ClassReference,
    report: ProgressReport,
    known: Sequence[tuple[float, float]],
    now_ms: int,
    config: LearnerConfig,
) -> tuple[list[tuple[float, float] | None], ClassReference | None]:
    """Each rank's (observation, weight factor) from its peers and its class
    (:func:`combined_observations`), and the reference with this job's cost."""
    assert config.cross_job is not None
    times = np.array([r.compute_s_per_step for r in report.ranks], dtype=np.float64)
    n = times.size
    if n == 0 or not np.all(np.isfinite(times) & (times > 0)):
        return [None] * n, None
    own = np.log(times) + np.log([r.model_speed for r in report.ranks])
    speeds = np.array([speed for speed, _ in known])
    cost = JobCost(report.job, float(np.median(own + speeds)), now_ms)
    new_reference = with_job_cost(reference, cost, config.cross_job)
    class_cost = reference_for(reference, report.job, now_ms, config.cross_job)
    if class_cost is None:  # the class says nothing yet: within the job only
        within = rank_observations(report, speeds.tolist(), config)
        return [None if x is None else (x, 1.0) for x in within], new_reference
    peers = variances = None
    if n >= 2:
        peers = leave_one_out_medians(own + speeds)
        # The peers' estimate errs by their speeds' errors (shared, so not averaged away)
        # and by their noise (a median of n - 1: pi / 2 x the variance of a mean).
        errors = leave_one_out_medians([error**2 for _, error in known])
        variances = errors + config.noise_sigma**2 * math.pi / (2 * (n - 1))
    observed = combined_observations(
        own,
        peers,
        variances,
        class_cost,
        noise_sigma=config.noise_sigma,
        repeat=reports_of(reference, report.job) + 1,
    )
    return [
        seen if abs(seen[0]) <= config.max_log_ratio else None for seen in observed
    ], new_reference


def _shrunk(stats: Running, prior: float, config: LearnerConfig) -> tuple[float, float, float]:
    """(log speed, its standard error, the data's share of the precision): the mean of
    the observations and the prior, each weighted by its precision."""
    data_precision = stats.weight / stats.sigma(config) ** 2
    prior_precision = 1.0 / config.prior_sigma**2
    total = data_precision + prior_precision
    log_speed = (data_precision * stats.mean + prior_precision * prior) / total
    return log_speed, math.sqrt(1.0 / total), data_precision / total


def _known(
    state: SpeedState | None, prior: float, now_ms: int, config: LearnerConfig
) -> tuple[float, float]:
    """(log speed, standard error) of what is known of a GPU now."""
    if state is None:
        return prior, config.prior_sigma
    log_speed, error, _ = _shrunk(state.stats.decayed(now_ms, config.half_life_s), prior, config)
    return log_speed, error


def estimate(
    state: SpeedState | None, now_ms: int, config: LearnerConfig, prior: float = 0.0
) -> LearnedSpeed:
    """The learned speed: the reports shrunk toward the prior (log ``prior``) by
    precision, with a 95 % interval."""
    stats = Running() if state is None else state.stats.decayed(now_ms, config.half_life_s)
    log_speed, error, confidence = _shrunk(stats, prior, config)
    return LearnedSpeed(
        speed=math.exp(log_speed),
        low=math.exp(log_speed - 1.96 * error),
        high=math.exp(log_speed + 1.96 * error),
        reports=0 if state is None else state.reports,
        weight=stats.weight,
        confidence=confidence,
    )


def peer_relative(speeds: Mapping[str, float]) -> dict[str, float]:
    """Each speed over the median of all (one model's GPUs under one class).

    Reports tell only ratios between GPUs: the learner's common level drifts as each GPU
    is learned from the others, and is pinned only by the priors. Read against the peers'
    median, a learned speed means what the design says: relative to the model's typical
    GPU."""
    if not speeds:
        return {}
    median = float(np.median(list(speeds.values())))
    return {gpu: speed / median for gpu, speed in speeds.items()}


def observe_all(
    states: dict[tuple[str, str], SpeedState],
    reports: Iterable[tuple[int, ProgressReport]],
    config: LearnerConfig,
    priors: Mapping[str, float] | None = None,
    references: dict[str, ClassReference] | None = None,
) -> dict[tuple[str, str], SpeedState]:
    """``states`` after these (now_ms, report) pairs, in order (updated in place);
    ``references`` (by class, updated in place): learn across jobs too."""
    for now_ms, report in reports:
        if references is None:
            states.update(observe(states, report, now_ms, config, priors))
            continue
        reference = references.get(report.job_class)
        learned, new_reference = observe_across(
            states, reference, report, now_ms, config=config, priors=priors
        )
        states.update(learned)
        if new_reference is not None:
            references[report.job_class] = new_reference
    return states
