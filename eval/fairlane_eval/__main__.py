"""`fairlane-eval`: replay a trace under every policy, or write the whole evaluation.

fairlane-eval run --trace pollux-workload-1 --cluster T4:24 --rate 4 --seeds 3
fairlane-eval run --jobs my.csv --throughputs mine.csv --variability gpus.csv ...
fairlane-eval report [--quick] [--out docs]        # what `make eval` runs
fairlane-eval straggler [--out docs]               # the PAI straggler check's chart
fairlane-eval live ...                             # the live-stack comparison
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

from fairlane_eval.core.cluster import ClusterSpec
from fairlane_eval.core.experiment import Setup, paired_change
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.fleet_variability import default_variability, read_variability_csv
from fairlane_eval.core.metrics import METRICS
from fairlane_eval.core.policies import POLICIES
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.throughputs import read_throughputs_csv, shipped_throughputs
from fairlane_eval.core.traces import load_shipped_trace, shipped_traces
from fairlane_eval.core.workload import read_jobs_csv
from fairlane_eval.report import ReportPlan, write_report
from fairlane_eval.runner import Trial, run_trials
from fairlane_scoring.config import ScoreConfig

__all__ = ["main"]


def _run_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
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
        "--gpus-per-node", type=int, default=8, help="for entries without xGPUS (default 8)"
    )
    run.add_argument("--max-jobs", type=int, help="only the first N jobs")
    run.add_argument("--policies", default=",".join(p.name for p in POLICIES))
    run.add_argument("--seeds", type=int, default=3, help="seeds 0..N-1 (default 3)")
    run.add_argument("--rate", type=float, default=1.0, help="fail-slow rate x the default")
    run.add_argument("--interval-s", type=float, default=60.0, help="sampling interval")
    run.add_argument("--threshold", type=float, default=0.65)
    run.add_argument("--recent-weight", type=float, default=0.70)
    run.add_argument("--history-s", type=float, default=600.0)
    run.add_argument("--stabilization-s", type=float, default=120.0)
    run.add_argument("--workers", type=int, help="parallel processes (default: CPUs)")
    run.add_argument("--baseline", default="static", help="the policy changes are paired against")


def _setup(args: argparse.Namespace) -> Setup:
    throughputs = (
        read_throughputs_csv(args.throughputs.read_text())
        if args.throughputs
        else shipped_throughputs()
    )
    if args.jobs:
        jobs = read_jobs_csv(args.jobs.read_text(), source=str(args.jobs))
        name = args.jobs.name
    else:
        jobs = load_shipped_trace(args.trace, throughputs, 0)
        name = args.trace
    variability = (
        read_variability_csv(args.variability.read_text())
        if args.variability
        else default_variability()
    )
    score = ScoreConfig(
        interval_s=args.interval_s,
        threshold=args.threshold,
        recent_weight=args.recent_weight,
        history_s=args.history_s,
        recent_window_s=min(300.0, args.history_s),
    )
    return Setup(
        name,
        tuple(jobs[: args.max_jobs]),
        ClusterSpec.parse(args.cluster, args.gpus_per_node),
        throughputs,
        variability,
        FaultModel(rate_scale=args.rate),
        SimConfig(score=score, stabilization_s=args.stabilization_s),
    )


def _run(args: argparse.Namespace) -> int:
    setup = _setup(args)
    names = [n.strip() for n in args.policies.split(",") if n.strip()]
    trials = [Trial(setup, name, seed) for name in names for seed in range(args.seeds)]
    results = run_trials(trials, workers=args.workers, label=setup.name)
    runs: dict[str, dict[int, object]] = {}
    for trial, summary in results.items():
        runs.setdefault(trial.policy, {})[trial.seed] = summary
    print(
        f"{setup.name}: {len(setup.jobs)} jobs on {setup.cluster.gpus} GPUs, "
        f"fail-slow rate x{args.rate:g}, seeds 0-{args.seeds - 1}; "
        f"changes paired against {args.baseline}"
    )
    shown = ("mean_jct_s", "p95_jct_s", "mean_queue_s", "lost_gpu_h", "slow_placement_share")
    print(f"{'policy':22s}" + "".join(f"{METRICS[m][0]:>32s}" for m in shown))
    for name in names:
        cells = []
        for m in shown:
            value = float(np.mean([getattr(s, m) for s in runs[name].values()]))
            text = f"{value / 3600:.3f} h" if METRICS[m][1] == "s" else f"{value:.3f}"
            if args.baseline in runs and name != args.baseline and METRICS[m][1] == "s":
                text += f" ({paired_change(runs, m, name, args.baseline)})"  # type: ignore[arg-type]
            cells.append(f"{text:>32s}")
        print(f"{name:22s}" + "".join(cells))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="fairlane-eval", description=__doc__.split("\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    _run_parser(sub)
    report = sub.add_parser("report", help="the whole evaluation, written to docs/")
    report.add_argument("--out", type=Path, default=Path("docs"))
    report.add_argument("--seeds", type=int, default=5)
    report.add_argument("--quick", action="store_true", help="a small smoke version")
    straggler = sub.add_parser("straggler", help="the straggler model against PAI's data")
    straggler.add_argument("--out", type=Path, default=Path("docs"))
    sub.add_parser("live", help="the live-stack comparison (see docs/evaluation-live.md)")
    args, rest = parser.parse_known_args(argv)
    if args.command == "run":
        return _run(args)
    if args.command == "report":
        command = "fairlane-eval report" + (" --quick" if args.quick else "")
        plan = ReportPlan(seeds=args.seeds, quick=args.quick)
        print(f"wrote {write_report(plan, args.out, command)}")
        return 0
    if args.command == "straggler":
        from fairlane_eval.charts.straggler import write_straggler_chart

        print(f"wrote {write_straggler_chart(args.out)}")
        return 0
    from fairlane_eval.live import live_main

    return live_main(rest)


if __name__ == "__main__":
    sys.exit(main())
