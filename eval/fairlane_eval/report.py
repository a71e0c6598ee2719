"""`fairlane-eval report`: the whole evaluation, written to docs/ as tables and charts.

Every number in the generated file comes with the command and seeds that reproduce it.
Runs take minutes: trials run in parallel processes behind a progress bar.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

from fairlane_eval.charts.results import (
    plot_gain_vs_rate,
    plot_jct_cdf,
    plot_timeline,
)
from fairlane_eval.core.cluster import ClusterSpec
from fairlane_eval.core.engine import simulate
from fairlane_eval.core.experiment import (
    Interval,
    Setup,
    hidden_fleet,
    paired_change,
    with_oracle,
)
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.fleet_variability import default_variability
from fairlane_eval.core.metrics import METRICS, Summary
from fairlane_eval.core.policies import ORACLE, ORACLES, POLICIES
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.throughputs import shipped_throughputs
from fairlane_eval.core.timeline import throttled_gpu_timeline
from fairlane_eval.core.traces import load_shipped_trace
from fairlane_eval.core.workload import Job
from fairlane_eval.runner import Trial, run_trials
from fairlane_eval.sensitivity import sensitivity_section

__all__ = ["SAME_PACKING", "ReportPlan", "Study", "headline_studies", "write_report"]

BASELINE = "static"
_FAIRLANE = ("fairlane-fastest", "fairlane-binpack", "fairlane-spread", "fairlane-hetero")
_STATIC = ("static", "k8s-least-allocated", "static-binpack")
#: Each Fairlane policy and the static policy that packs as it does (fastest packs ties).
SAME_PACKING = {
    "fairlane-fastest": "static-binpack",
    "fairlane-binpack": "static-binpack",
    "fairlane-spread": "k8s-least-allocated",
}


@dataclass(frozen=True)
class ReportPlan:
    seeds: int = 5
    rates: tuple[float, ...] = (0.0, 1.0, 4.0, 16.0)
    sensitivity_rate: float = 16.0
    quick: bool = False  # a small smoke version (CI): fewer jobs, seeds and rates


@dataclass(frozen=True)
class Study:
    """One trace on one cluster, under ``policies``, at each fail-slow rate, over seeds."""

    setup: Setup
    rates: tuple[float, ...]
    policies: tuple[str, ...]
    seeds: int

    def at(self, rate: float) -> Setup:
        return self._setups[rate]

    @functools.cached_property
    def _setups(self) -> dict[float, Setup]:
        return {r: self.setup.with_(faults=self.setup.faults.scaled(r)) for r in self.rates}


def headline_studies(plan: ReportPlan) -> list[Study]:
    """The shipped traces on clusters where jobs queue (static placement's utilisation
    0.3-0.8): Pollux's workload on its testbed's size, Philly's jobs at two loads,
    Gavel's heterogeneous mix on 48 GPUs of each model (fewer seeds and policies: its
    jobs run for days, so each trial takes longest)."""
    throughputs = shipped_throughputs()
    cut = 60 if plan.quick else None
    pollux = tuple(load_shipped_trace("pollux-workload-1", throughputs, 0))[:cut]
    philly = tuple(load_shipped_trace("philly-10k", throughputs, 0))[: cut or 2000]
    gavel = tuple(load_shipped_trace("gavel-multi", throughputs, 0))[: cut or 400]

    def setup(name: str, jobs: tuple[Job, ...], cluster: ClusterSpec) -> Setup:
        return Setup(
            name, jobs, cluster, throughputs, default_variability(), FaultModel(), SimConfig()
        )

    every = tuple(p.name for p in POLICIES)
    rates = plan.rates[:2] if plan.quick else plan.rates
    few = max(1, min(plan.seeds, 3))
    hetero = (*_STATIC, "fairlane-fastest", "fairlane-hetero", *ORACLES)
    return [
        Study(
            setup("pollux-workload-1 on 64 T4", pollux, ClusterSpec((("T4", 8),))),
            rates,
            every,
            plan.seeds,
        ),
        Study(
            setup("philly-2k on 256 V100", philly, ClusterSpec((("V100", 32),))),
            rates,
            every,
            plan.seeds,
        ),
        Study(
            setup("philly-2k on 128 V100", philly, ClusterSpec((("V100", 16),))), rates, every, few
        ),
        Study(
            setup(
                "gavel-multi-400 on 48 K80 + 48 P100 + 48 V100",
                gavel,
                ClusterSpec((("K80", 6), ("P100", 6), ("V100", 6))),
            ),
            tuple(r for r in rates if r in (0.0, 1.0, 16.0)) or rates,
            hetero,
            few,
        ),
    ]


def _runs(results: dict[Trial, Summary], setup: Setup) -> dict[str, dict[int, Summary]]:
    """Per policy and seed, the summaries of ``setup``'s trials, and the oracle's."""
    runs: dict[str, dict[int, Summary]] = {}
    for trial, summary in results.items():
        if trial.setup == setup:
            runs.setdefault(trial.policy, {})[trial.seed] = summary
    return with_oracle(runs)


def _fmt(metric: str, value: float) -> str:
    unit = METRICS[metric][1]
    if unit == "s":
        return f"{value / 3600:.2f} h"
    if unit == "share":
        return f"{value:.1%}"
    return f"{value:.2f}"


def _table(runs: dict[str, dict[int, Summary]], metrics: Sequence[str]) -> list[str]:
    """Per policy: each metric's mean over seeds, and its paired change vs static."""
    header = "| policy | " + " | ".join(METRICS[m][0] for m in metrics) + " |"
    lines = [header, "|---" * (len(metrics) + 1) + "|"]
    for name in [*(p.name for p in POLICIES), ORACLE]:
        if name not in runs:
            continue
        cells = []
        for m in metrics:
            mean = float(np.mean([getattr(s, m) for s in runs[name].values()]))
            cell = _fmt(m, mean)
            if name != BASELINE and METRICS[m][1] == "s":
                cell += f" ({paired_change(runs, m, name, BASELINE)})"
            cells.append(cell)
        label = f"**{name}**" if name == ORACLE else name
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return lines


def _headline(plan: ReportPlan, out: Path, lines: list[str]) -> list[Study]:
    studies = headline_studies(plan)
    trials = [
        Trial(study.at(rate), name, seed)
        for study in studies
        for rate in study.rates
        for name in study.policies
        for seed in range(study.seeds)
    ]
    results = run_trials(trials, label="headline")
    metrics = (
        "mean_jct_s",
        "median_jct_s",
        "p95_jct_s",
        "makespan_s",
        "mean_queue_s",
        "threshold_queue_share",
        "lost_gpu_h",
        "slow_placement_share",
        "utilisation",
    )
    lines += ["## Headline: every policy on each trace, by fail-slow rate", ""]
    for study in studies:
        gains: dict[str, list[tuple[float, Interval]]] = {}
        for rate in study.rates:
            runs = _runs(results, study.at(rate))
            setup = study.setup
            lines += [
                f"### {setup.name}, fail-slow rate x{rate:g}",
                "",
                f"{len(setup.jobs)} jobs, {setup.cluster.gpus} GPUs, seeds 0-{study.seeds - 1}; "
                "times are means over seeds, (change vs static, paired by seed, "
                "[95 % CI]).",
                "",
                *_table(runs, metrics),
                "",
                "Distance to the oracle (mean JCT, paired): "
                + ", ".join(
                    f"{name} {paired_change(runs, 'mean_jct_s', name, ORACLE)}"
                    for name in _FAIRLANE
                    if name in runs
                ),
                "",
            ]
            lines += [
                "Health alone, against the static policy that packs the same way (mean JCT, "
                "paired): "
                + ", ".join(
                    f"{name} vs {twin} {paired_change(runs, 'mean_jct_s', name, twin)}"
                    for name, twin in SAME_PACKING.items()
                    if name in runs and twin in runs
                ),
                "",
            ]
            for name in (*_FAIRLANE, ORACLE):
                if name in runs:
                    gains.setdefault(name, []).append(
                        (rate, paired_change(runs, "mean_jct_s", name, BASELINE))
                    )
        slug = study.setup.name.split()[0] + "-" + str(study.setup.cluster.gpus)
        chart = plot_gain_vs_rate(gains, study.setup.name, out / f"eval-gain-{slug}.png")
        lines += [f"![gain vs rate, {study.setup.name}]({chart.name})", ""]
    _fairness(results, studies[-1], lines)
    return studies


def _fairness(results: dict[Trial, Summary], study: Study, lines: list[str]) -> None:
    rate = study.rates[1] if len(study.rates) > 1 else study.rates[0]
    runs = _runs(results, study.at(rate))
    lines += [
        f"## Heterogeneity: throughput against fairness ({study.setup.name}, rate x{rate:g})",
        "",
        *_table(runs, ("mean_jct_s", "makespan_s", "mean_ftf", "max_ftf", "worst_namespace_ftf")),
        "",
    ]


def _cdf(studies: list[Study], out: Path, lines: list[str]) -> None:
    study = studies[1]
    rate = study.rates[-1]
    setup = study.at(rate)
    fleet = hidden_fleet(setup, 0)
    jcts = {}
    for spec in POLICIES:
        result = simulate(setup.jobs, fleet, spec, setup.throughputs, setup.config, seed=0)
        jcts[spec.name] = [o.jct_s for o in result.outcomes if o.jct_s is not None]
    chart = plot_jct_cdf(
        jcts, f"JCT CDF, {setup.name}, rate x{rate:g}, seed 0", out / "eval-jct-cdf.png"
    )
    lines += ["## Job completion times", "", f"![JCT CDF]({chart.name})", ""]


def _timeline(out: Path, lines: list[str]) -> None:
    config = SimConfig()
    timeline = throttled_gpu_timeline(config.score, config.stabilization_s)
    chart = plot_timeline(timeline, config.score.threshold, out / "eval-timeline.png")
    lines += ["## One throttled GPU", "", f"![timeline]({chart.name})", ""]


def write_report(plan: ReportPlan, out: Path, command: str) -> Path:
    """Run the evaluation and write ``out/evaluation-results.md`` with its charts."""
    out.mkdir(parents=True, exist_ok=True)
    now = datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC")
    lines = [
        "# Evaluation results (generated)",
        "",
        f"Written by `{command}` on {now}. docs/evaluation.md explains the setup and what "
        "these numbers mean; do not edit this file by hand.",
        "",
    ]
    _timeline(out, lines)
    studies = _headline(plan, out, lines)
    _cdf(studies, out, lines)
    base = studies[0].setup
    seeds = range(min(plan.seeds, 3))
    lines += sensitivity_section(base, BASELINE, plan.sensitivity_rate, seeds, out)
    target = out / "evaluation-results.md"
    target.write_text("\n".join(lines) + "\n")
    return target
