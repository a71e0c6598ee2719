"""Experiments: the same jobs on the same hidden fleets under every policy, over seeds.

A trial is (setup, policy, seed). The seed draws the hidden fleet (persistent speeds and
episodes) and the samples' noise, so every policy of one seed faces the same fleet and
the same jobs; changes against the baseline are paired by seed, and their confidence
intervals are Student-t intervals over the seeds' paired changes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from fairlane_eval.core.cluster import ClusterSpec, HiddenFleet
from fairlane_eval.core.engine import simulate
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.fleet_variability import Variability
from fairlane_eval.core.metrics import Summary, summarise
from fairlane_eval.core.policies import ORACLE, ORACLES, policy
from fairlane_eval.core.sim_types import SimConfig, Throughputs
from fairlane_eval.core.workload import Job

__all__ = ["Interval", "Setup", "paired_change", "run_trial", "t_interval", "with_oracle"]

# Two-sided 95 % Student-t quantiles by degrees of freedom (1..12), then ~normal.
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262, 2.228, 2.201, 2.179)


@dataclass(frozen=True, eq=False)
class Setup:
    """What a trial runs: the jobs, the cluster, its measurements and the configuration.
    Compared by identity (a trace of 10,000 jobs is not worth hashing)."""

    name: str
    jobs: tuple[Job, ...]
    cluster: ClusterSpec
    throughputs: Throughputs
    variability: Variability  # measured same-model relative speeds, per model
    faults: FaultModel
    config: SimConfig
    class_speeds: bool = False  # per-GPU per-class factors from PAL's Longhorn data

    @property
    def horizon_s(self) -> float:
        """Episodes are drawn over this long: the last arrival, then twice the time the
        whole cluster needs for all the work on its slowest model, and a week more."""
        last = max((j.arrival_s for j in self.jobs), default=0.0)
        models = self.cluster.models
        gpu_s = 0.0
        for j in self.jobs:
            rates = [self.throughputs.steps_per_s(j.job_type, m, j.gpus) for m in models]
            slowest = min((r for r in rates if r > 0), default=0.0)
            gpu_s += j.gpus * j.work_steps / slowest if slowest else 0.0
        return last + 2 * gpu_s / self.cluster.gpus + 7 * 86_400

    def with_(self, **changes: object) -> Setup:
        return replace(self, **changes)  # type: ignore[arg-type]


def hidden_fleet(setup: Setup, seed: int) -> HiddenFleet:
    return HiddenFleet.build(
        setup.cluster,
        setup.variability,
        setup.faults,
        setup.horizon_s,
        seed,
        class_speeds=setup.class_speeds,
    )


def run_trial(
    setup: Setup, policy_name: str, seed: int, progress: Callable[[float], None] | None = None
) -> Summary:
    fleet = hidden_fleet(setup, seed)
    result = simulate(
        setup.jobs,
        fleet,
        policy(policy_name),
        setup.throughputs,
        setup.config,
        seed=seed,
        progress=progress,
    )
    return summarise(result)


@dataclass(frozen=True)
class Interval:
    mean: float
    low: float
    high: float
    n: int

    def __str__(self) -> str:
        if not math.isfinite(self.mean):
            return "n/a"
        if self.n < 2 or not math.isfinite(self.low):
            return f"{self.mean:+.1%}"
        return f"{self.mean:+.1%} [{self.low:+.1%}, {self.high:+.1%}]"


def t_interval(values: Sequence[float]) -> Interval:
    """Mean and 95 % confidence interval of ``values`` (Student t)."""
    x = np.asarray(values, dtype=np.float64)
    n = len(x)
    mean = float(x.mean()) if n else math.nan
    if n < 2:
        return Interval(mean, math.nan, math.nan, n)
    t = _T95[n - 2] if n - 2 < len(_T95) else 1.96
    half = t * float(x.std(ddof=1)) / math.sqrt(n)
    return Interval(mean, mean - half, mean + half, n)


def paired_change(
    runs: Mapping[str, Mapping[int, Summary]], metric: str, policy_name: str, baseline: str
) -> Interval:
    """Relative change of ``metric`` under ``policy_name`` against ``baseline``, per seed
    (policy / baseline - 1; negative = lower), with its interval over the seeds."""
    seeds = sorted(set(runs[policy_name]) & set(runs[baseline]))
    changes = []
    for seed in seeds:
        base = float(getattr(runs[baseline][seed], metric))
        value = float(getattr(runs[policy_name][seed], metric))
        if base:
            changes.append(value / base - 1)
    return t_interval(changes)


def with_oracle(runs: Mapping[str, Mapping[int, Summary]]) -> dict[str, dict[int, Summary]]:
    """``runs`` plus the oracle: per seed, the oracle policy with the lowest mean JCT."""
    result = {name: dict(per_seed) for name, per_seed in runs.items()}
    present = [name for name in ORACLES if name in runs]
    if present:
        seeds = set.intersection(*(set(runs[name]) for name in present))
        result[ORACLE] = {
            seed: replace(
                min((runs[name][seed] for name in present), key=lambda s: s.mean_jct_s),
                policy=ORACLE,
            )
            for seed in sorted(seeds)
        }
    return result
