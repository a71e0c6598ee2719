"""`fairlane-eval run`: one trace on one cluster under chosen policies, over seeds.

The I/O around core/: reads the user's files, checks that the inputs fit together
(every job can be placed somewhere, every model has speeds), warns where the run rests
on a prior rather than a measurement, runs the trials and prints the results. Input
that cannot be used raises one of the errors of :mod:`fairlane_eval.errors`, which
``__main__`` reports as one line.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

from fairlane_eval.core.cluster_spec import MAX_GPUS_PER_NODE, ClusterSpec
from fairlane_eval.core.experiment import Setup, with_oracle
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.feasibility import unplaceable_jobs
from fairlane_eval.core.fleet_variability import (
    Variability,
    default_variability,
    read_variability_csv,
    speeds_for_model,
)
from fairlane_eval.core.metrics import Summary
from fairlane_eval.core.policies import LEARNING_POLICIES, ORACLE, ORACLES, POLICIES
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.throughputs import (
    SCALE_FROM_MODEL,
    ThroughputTable,
    read_throughputs_csv,
    shipped_throughputs,
)
from fairlane_eval.core.traces import load_shipped_trace, shipped_traces
from fairlane_eval.core.workload import Job, read_jobs_csv
from fairlane_eval.errors import OptionError, VariabilityError, WorkloadError
from fairlane_eval.run_output import RunResults, results_json, results_table
from fairlane_eval.runner import Trial, run_trials
from fairlane_scoring.config import ScoreConfig

__all__ = ["add_run_parser", "positive_int", "run_command"]

_DEFAULT_GPUS_PER_NODE = 8
_DEFAULT_BASELINE = "static"


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _node_size(text: str) -> int:
    value = positive_int(text)
    if value > MAX_GPUS_PER_NODE:
        raise argparse.ArgumentTypeError(f"must be 1..{MAX_GPUS_PER_NODE}, got {value}")
    return value


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"must be finite, got {text}")
    return value


def _non_negative(text: str) -> float:
    value = _number(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {text}")
    return value


def _positive(text: str) -> float:
    value = _number(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def _share(text: str) -> float:
    value = _number(text)
    if not 0 <= value <= 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1], got {text}")
    return value


def add_run_parser(sub: argparse._SubParsersAction[Any]) -> None:
    run = sub.add_parser("run", help="replay one trace on one cluster under chosen policies")
    source = run.add_mutually_exclusive_group(required=True)
    source.add_argument("--trace", choices=shipped_traces(), help="a shipped trace")
    source.add_argument("--jobs", type=Path, help="your own jobs CSV (docs/evaluation-formats.md)")
    run.add_argument("--throughputs", type=Path, help="per-model throughputs CSV (default Gavel's)")
    run.add_argument("--variability", type=Path, help="per-GPU speeds CSV (default PAL's V100s)")
    run.add_argument(
        "--cluster",
        default="V100:16",
        help="MODEL:NODES[xGPUS_PER_NODE],... e.g. T4:16x4,A100-40GB:2x8 (default V100:16)",
    )
    run.add_argument(
        "--gpus-per-node",
        type=_node_size,
        help="GPUs a node of a --cluster entry without xGPUS has (default 8), and the node "
        "size a shipped trace splits its gangs by (default: the cluster's smallest node)",
    )
    run.add_argument("--max-jobs", type=positive_int, help="only the first N jobs")
    run.add_argument(
        "--policies",
        default=",".join(p.name for p in POLICIES),
        help=f"comma-separated; {ORACLE!r} is the best of {', '.join(ORACLES)} per seed; "
        f"also {', '.join(p.name for p in LEARNING_POLICIES)} (with --class-speeds)",
    )
    run.add_argument(
        "--class-speeds",
        action="store_true",
        help="GPUs also get PAL Longhorn per-job-class speeds (docs/evaluation.md, issue 27)",
    )
    run.add_argument("--seeds", type=positive_int, default=3, help="seeds 0..N-1 (default 3)")
    run.add_argument("--rate", type=_non_negative, default=1.0, help="fail-slow rate x default")
    run.add_argument("--interval-s", type=_positive, default=60.0, help="sampling interval")
    run.add_argument("--threshold", type=_share, default=0.65)
    run.add_argument("--recent-weight", type=_share, default=0.70)
    run.add_argument("--history-s", type=_positive, default=600.0)
    run.add_argument("--stabilization-s", type=_non_negative, default=120.0)
    run.add_argument("--workers", type=positive_int, help="parallel processes (default: CPUs)")
    run.add_argument(
        "--baseline", help=f"the policy changes are paired against (default {_DEFAULT_BASELINE})"
    )
    run.add_argument(
        "--allow-unplaceable",
        action="store_true",
        help="run without the jobs no node of the cluster can take, instead of failing",
    )
    run.add_argument("--json", action="store_true", help="print the results as JSON")


Warn = Callable[[str], None]


@dataclass(frozen=True)
class _Plan:
    setup: Setup
    unplaceable: int
    shown: tuple[str, ...]  # the policies asked for, in order (ORACLE included)
    trials: tuple[str, ...]  # the policies to run
    baseline: str | None


def _cluster(args: argparse.Namespace) -> ClusterSpec:
    cluster = ClusterSpec.parse(args.cluster, args.gpus_per_node or _DEFAULT_GPUS_PER_NODE)
    if args.gpus_per_node is not None and args.jobs and cluster.gives_every_node_size:
        raise OptionError(
            f"--gpus-per-node {args.gpus_per_node} applies to nothing: every --cluster entry "
            "gives its node size (MODEL:NODESxGPUS) and --jobs gives each job's GPUs per node"
        )
    return cluster


def _jobs(
    args: argparse.Namespace, throughputs: ThroughputTable, cluster: ClusterSpec
) -> list[Job]:
    if args.jobs:
        text = args.jobs.read_text()
        return read_jobs_csv(text, source=str(args.jobs), job_types=throughputs.job_types())
    split = args.gpus_per_node or cluster.node_sizes[0]
    return load_shipped_trace(args.trace, throughputs, 0, gpus_per_node=split)


def _variability(args: argparse.Namespace, cluster: ClusterSpec) -> Variability:
    if not args.variability:
        return default_variability()
    variability = read_variability_csv(args.variability.read_text(), source=str(args.variability))
    for model in cluster.models:
        try:
            speeds_for_model(variability, model)
        except VariabilityError as exc:
            raise VariabilityError(
                f"{args.variability}: {exc} (add rows without a model)"
            ) from None
    return variability


def _config(args: argparse.Namespace) -> SimConfig:
    try:
        score = ScoreConfig(
            interval_s=args.interval_s,
            threshold=args.threshold,
            recent_weight=args.recent_weight,
            history_s=args.history_s,
            recent_window_s=min(300.0, args.history_s),
        )
        return SimConfig(score=score, stabilization_s=args.stabilization_s)
    except ValueError as exc:
        raise OptionError(f"score options: {exc}") from None


def _warn_fills(
    throughputs: ThroughputTable, jobs: Sequence[Job], cluster: ClusterSpec, source: str, warn: Warn
) -> None:
    """One warning a model the throughputs do not measure for some of the jobs' types."""
    types = sorted({j.job_type for j in jobs})
    for fill in throughputs.fills(types, cluster.models):
        warn(
            f"no {fill.model} throughput in {source} for {len(fill.job_types)} of the jobs' "
            f"{len(types)} job types (e.g. {fill.job_types[0]!r}): filled with "
            f"{SCALE_FROM_MODEL}'s x {fill.factor:.3g} (the catalogue's relative speed "
            f"{fill.model} / {SCALE_FROM_MODEL})"
        )


def _placeable(
    args: argparse.Namespace,
    jobs: Sequence[Job],
    cluster: ClusterSpec,
    throughputs: ThroughputTable,
    warn: Warn,
) -> tuple[list[Job], int]:
    """The jobs some placement can take, and how many were left out; fails unless
    ``--allow-unplaceable`` when any cannot."""
    found = unplaceable_jobs(jobs, cluster.groups, throughputs)
    if not found:
        return list(jobs), 0
    first = found[0]
    warn(
        f"{len(found)} of {len(jobs)} jobs can never be placed on {args.cluster} "
        f"(e.g. {first.job.job_id}: {first.reason})"
    )
    if not args.allow_unplaceable:
        jobs_text = "1 job" if len(found) == 1 else f"{len(found)} jobs"
        raise WorkloadError(
            f"{jobs_text} can never be placed on this cluster: give a larger --cluster, "
            "or --allow-unplaceable to run without them"
        )
    left_out = {id(u.job) for u in found}
    kept = [j for j in jobs if id(j) not in left_out]
    if not kept:
        raise WorkloadError(f"no job of {len(jobs)} can be placed on this cluster")
    return kept, len(found)


def _policies(args: argparse.Namespace) -> tuple[tuple[str, ...], tuple[str, ...], str | None]:
    """(policies to show, policies to run, baseline or None) from the options."""
    known = {p.name for p in (*POLICIES, *LEARNING_POLICIES)}
    shown = tuple(dict.fromkeys(n.strip() for n in args.policies.split(",") if n.strip()))
    unknown = [n for n in shown if n not in known and n != ORACLE]
    if unknown or not shown:
        names = ", ".join([*(p.name for p in (*POLICIES, *LEARNING_POLICIES)), ORACLE])
        raise OptionError(f"--policies: unknown {', '.join(unknown) or '(none)'}; known: {names}")
    trials = tuple(
        dict.fromkeys(n for name in shown for n in (ORACLES if name == ORACLE else (name,)))
    )
    baseline = args.baseline or _DEFAULT_BASELINE
    if baseline not in shown:
        if args.baseline is not None:
            raise OptionError(f"--baseline {baseline} is not among --policies {args.policies}")
        return shown, trials, None
    return shown, trials, baseline


def _plan(args: argparse.Namespace, warn: Warn) -> _Plan:
    shown, trials, baseline = _policies(args)
    cluster = _cluster(args)
    if args.throughputs:
        source = str(args.throughputs)
        throughputs = read_throughputs_csv(args.throughputs.read_text(), source=source)
    else:
        source, throughputs = "the shipped gavel_throughputs.csv", shipped_throughputs()
    jobs = _jobs(args, throughputs, cluster)[: args.max_jobs]
    variability = _variability(args, cluster)
    config = _config(args)
    jobs, left_out = _placeable(args, jobs, cluster, throughputs, warn)
    _warn_fills(throughputs, jobs, cluster, source, warn)
    name = args.jobs.name if args.jobs else args.trace
    faults = FaultModel(rate_scale=args.rate)
    setup = Setup(
        name, tuple(jobs), cluster, throughputs, variability, faults, config, args.class_speeds
    )
    return _Plan(setup, left_out, shown, trials, baseline)


def run_command(args: argparse.Namespace, out: TextIO, warn: Warn) -> int:
    """Run what ``args`` asks; print the table (or JSON) to ``out``, warnings to ``warn``."""
    plan = _plan(args, warn)
    seeds = tuple(range(args.seeds))
    trials = [Trial(plan.setup, name, seed) for name in plan.trials for seed in seeds]
    results = run_trials(trials, workers=args.workers, label=plan.setup.name)
    runs: dict[str, dict[int, Summary]] = {}
    for trial, summary in results.items():
        runs.setdefault(trial.policy, {})[trial.seed] = summary
    if ORACLE in plan.shown:
        runs = with_oracle(runs)
    shown = RunResults(
        name=plan.setup.name,
        jobs=len(plan.setup.jobs),
        unplaceable=plan.unplaceable,
        cluster=plan.setup.cluster,
        rate=args.rate,
        seeds=seeds,
        baseline=plan.baseline,
        runs={name: runs[name] for name in plan.shown},
    )
    print(results_json(shown) if args.json else results_table(shown), file=out)
    return 0
