"""Learned speed (issue 27): a first measurement, as a small script.

``python -m fairlane_eval.learned_study`` runs, on a V100 fleet whose GPUs carry PAL
Longhorn per-class speeds (node-correlated, :meth:`HiddenFleet.build` ``class_speeds``)
and no other persistent spread, the policies static, fairlane-fastest, fairlane-learned,
fairlane-learned-across (learning across jobs of a class too) and oracle-learned at fault
rates x0 and x1 over paired seeds, then the same on a uniform fleet (no class speeds);
and the learner's time to learn (:func:`time_to_learn`). ``--job-cost-sigma``: how far
each job's step cost is from what the learner knows of it (``SimConfig.job_cost_sigma``).
Prints Markdown tables (the numbers in docs/evaluation.md come from it).
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import TextIO

import numpy as np

from fairlane_eval.core.cluster import ClusterSpec
from fairlane_eval.core.experiment import Setup, t_interval
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.fleet_variability import Variability
from fairlane_eval.core.metrics import Summary
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.throughputs import shipped_throughputs
from fairlane_eval.core.traces import load_shipped_trace
from fairlane_eval.runner import Trial, run_trials
from fairlane_scoring.learned_speed import (
    LearnerConfig,
    ProgressReport,
    RankReport,
    SpeedState,
    estimate,
    observe_all,
    peer_relative,
)
from fairlane_sim.class_speeds import CLASSES, sample_class_speeds

__all__ = ["captured_share", "main", "time_to_learn"]

POLICIES = (
    "static",
    "fairlane-fastest",
    "fairlane-learned",
    "fairlane-learned-across",
    "oracle-learned",
)
LEARNED = ("fairlane-learned", "fairlane-learned-across")
_EVEN: Variability = {None: (1.0,)}  # no spread but the class speeds


def captured_share(static: float, learned: float, oracle: float) -> float:
    """The share of the oracle's gain over static that learning captured:
    ``(static - learned) / (static - oracle)``; NaN when the oracle gains nothing."""
    gain = static - oracle
    return (static - learned) / gain if gain > 0 else math.nan


def time_to_learn(
    seed: int,
    job_class: str,
    *,
    nodes: int = 8,
    gpus_per_node: int = 4,
    gang: int = 4,
    noise_sigma: float = 0.03,
    within: float = 0.03,
    minutes: int = 240,
) -> list[float]:
    """Per GPU whose true speed is more than ``within`` off the median (those a prior of
    1.0 gets wrong), the job-minutes until its learned speed (peer-relative) stays within
    ``within`` of its true one (over the median), inf if never in ``minutes``.

    A fleet of ``nodes`` x ``gpus_per_node`` new GPUs with Longhorn speeds for
    ``job_class``; each minute every GPU is in one gang of ``gang`` ranks, drawn at random
    across the fleet (a gang inside one node could never tell a slow node from a slow
    job), and every rank reports its compute time with lognormal noise."""
    rng = np.random.default_rng([seed, 2727])
    true = sample_class_speeds(rng, nodes, gpus_per_node, (job_class,))[:, 0]
    true = true / float(np.median(true))
    n = len(true)
    uuids = [f"GPU-{i}" for i in range(n)]
    config, states = LearnerConfig(), dict[tuple[str, str], SpeedState]()
    last_out = np.zeros(n)  # the last minute each GPU was outside the band
    for minute in range(1, minutes + 1):
        now_ms = minute * 60_000
        order = rng.permutation(n)
        reports = []
        for start in range(0, n - gang + 1, gang):
            rows = order[start : start + gang]
            noise = np.exp(rng.normal(0.0, noise_sigma, gang))
            ranks = tuple(RankReport(uuids[r], noise[k] / true[r]) for k, r in enumerate(rows))
            reports.append((now_ms, ProgressReport(job_class, 60.0, ranks)))
        observe_all(states, reports, config)
        learned = {u: estimate(states.get((u, job_class)), now_ms, config).speed for u in uuids}
        relative = peer_relative(learned)
        error = np.array([abs(relative[u] / true[i] - 1) for i, u in enumerate(uuids)])
        last_out[error > within] = minute
    times = [math.inf if m >= minutes else float(m) + 1 for m in last_out]
    return [t for t, v in zip(times, true, strict=True) if abs(v - 1) > within]


def _setup(
    jobs: int, cluster: str, rate: float, *, class_speeds: bool, job_cost_sigma: float
) -> Setup:
    throughputs = shipped_throughputs()
    spec = ClusterSpec.parse(cluster, 4)
    trace = load_shipped_trace("gavel-multi", throughputs, 0, gpus_per_node=4)[:jobs]
    name = f"gavel-multi-{jobs} on {cluster}"
    faults = FaultModel(rate_scale=rate)
    config = SimConfig(job_cost_sigma=job_cost_sigma)
    return Setup(name, tuple(trace), spec, throughputs, _EVEN, faults, config, class_speeds)


def _jct(runs: dict[str, dict[int, Summary]], name: str, seed: int) -> float:
    return runs[name][seed].mean_jct_s


def _fleet_table(
    out: TextIO,
    jobs: int,
    cluster: str,
    seeds: Sequence[int],
    *,
    workers: int,
    job_cost_sigma: float,
) -> None:
    print(
        "| fleet | rate | static | fairlane-fastest | fairlane-learned | "
        "fairlane-learned-across | oracle-learned | across vs fastest | across vs learned "
        "| share of oracle's gain: learned | across |",
        file=out,
    )
    print("|---" * 11 + "|", file=out)
    for class_speeds in (True, False):
        for rate in (0.0, 1.0):
            setup = _setup(
                jobs, cluster, rate, class_speeds=class_speeds, job_cost_sigma=job_cost_sigma
            )
            trials = [Trial(setup, p, s) for p in POLICIES for s in seeds]
            results = run_trials(trials, workers=workers, label=f"x{rate:g}")
            runs: dict[str, dict[int, Summary]] = {}
            for trial, summary in results.items():
                runs.setdefault(trial.policy, {})[trial.seed] = summary
            mean = {p: np.mean([_jct(runs, p, s) for s in seeds]) / 3600 for p in POLICIES}
            changes = [
                t_interval([_jct(runs, LEARNED[1], s) / _jct(runs, other, s) - 1 for s in seeds])
                for other in ("fairlane-fastest", LEARNED[0])
            ]
            shares = [
                ", ".join(
                    "n/a" if math.isnan(x) else f"{x:.0%}"
                    for x in (
                        captured_share(
                            _jct(runs, "static", s),
                            _jct(runs, policy, s),
                            _jct(runs, "oracle-learned", s),
                        )
                        for s in seeds
                    )
                )
                for policy in LEARNED
            ]
            fleet = "Longhorn classes" if class_speeds else "uniform"
            cells = " | ".join(
                [*(f"{mean[p]:.3f} h" for p in POLICIES), *map(str, changes), *shares]
            )
            print(f"| {fleet} | x{rate:g} | {cells} |", file=out)


def _learn_table(out: TextIO, seeds: Sequence[int]) -> None:
    print(
        "\n| class | GPUs > 3 % off the median | median job-min | p90 job-min | never (240 min) |",
        file=out,
    )
    print("|---|---|---|---|---|", file=out)
    for job_class in CLASSES:
        times = np.array([t for s in seeds for t in time_to_learn(s, job_class)])
        finite = times[np.isfinite(times)]
        median = float(np.median(times)) if len(times) else math.nan
        p90 = float(np.percentile(times, 90)) if len(times) else math.nan
        never = len(times) - len(finite)
        print(f"| {job_class} | {len(times)} | {median:g} | {p90:g} | {never} |", file=out)


def main(argv: Sequence[str] | None = None, out: TextIO = sys.stdout) -> int:
    parser = argparse.ArgumentParser(prog="python -m fairlane_eval.learned_study")
    parser.add_argument("--jobs", type=int, default=200)
    parser.add_argument("--cluster", default="V100:8x4")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--workers", type=int, default=1)
    parser.add_argument("--skip-fleet", action="store_true", help="only time to learn")
    parser.add_argument(
        "--job-cost-sigma",
        type=float,
        default=SimConfig().job_cost_sigma,
        help="lognormal sigma of each job's unknown step cost (0: known exactly)",
    )
    args = parser.parse_args(argv)
    seeds = tuple(range(args.seeds))
    if not args.skip_fleet:
        _fleet_table(
            out,
            args.jobs,
            args.cluster,
            seeds,
            workers=args.workers,
            job_cost_sigma=args.job_cost_sigma,
        )
    _learn_table(out, seeds)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
