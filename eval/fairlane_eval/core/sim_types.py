"""What the simulator takes and gives: its configuration, per-job outcomes, the result."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Protocol

from fairlane_eval.core.workload import Job
from fairlane_scoring.config import ScoreConfig

__all__ = ["JobOutcome", "SimConfig", "SimResult", "Throughputs"]


class Throughputs(Protocol):
    def steps_per_s(self, job_type: str, model: str, gpus: int) -> float: ...


@dataclass(frozen=True)
class SimConfig:
    score: ScoreConfig = field(default_factory=lambda: ScoreConfig(interval_s=60.0))
    stabilization_s: float = 120.0
    max_time_s: float = math.inf  # stop here even if jobs remain (they count as unfinished)
    #: Every running gang's ranks report compute time per step this often (learning
    #: policies only), each with lognormal noise of this sigma.
    report_interval_s: float = 60.0
    report_noise_sigma: float = 0.03
    #: Each job's step cost, as the learner knows it, is off by a lognormal factor of
    #: this sigma, drawn once per job (the product knows a job's class, not its cost).
    #: 1.08: the pooled spread of log V100 steps/s among Gavel's job types that share a
    #: class (resnet50 0.85, bert 1.36, pagerank 0.86). 0: every cost known exactly.
    job_cost_sigma: float = 1.08
    #: A one-GPU job (learning across jobs only) sends this many reports, not one a
    #: window for its whole run (engine: why).
    lone_reports: int = 15

    @property
    def interval_s(self) -> float:
        return self.score.interval_s


@dataclass(frozen=True)
class JobOutcome:
    job: Job
    start_s: float | None  # None: never placed
    end_s: float | None  # None: did not finish
    rows: tuple[int, ...]  # the GPUs it ran on
    held_s: float  # waited although GPUs that the health filter held out would have fit it
    #: GPU-seconds run below the job's rate on median GPUs of the models it got, weighted
    #: by the shortfall: persistent slowness (variability) and fail-slow episodes alike.
    lost_gpu_s: float
    slow_gpus: int  # its GPUs slower than 0.9 x their model's median when it was placed
    #: How long it runs alone on its ideal allocation (feasibility.ideal_rate): median GPUs
    #: of the fastest models that can host it; the same under every policy.
    ideal_s: float

    @property
    def jct_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.job.arrival_s

    @property
    def queued_s(self) -> float | None:
        return None if self.start_s is None else self.start_s - self.job.arrival_s


@dataclass(frozen=True)
class SimResult:
    policy: str
    outcomes: tuple[JobOutcome, ...]
    gpus: int
    end_s: float
    samples_taken: int
