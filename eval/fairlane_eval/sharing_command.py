"""`fairlane-eval sharing`: the fractional-packing study (issue 29) on Alibaba's 2023 trace.

fairlane-eval sharing --seeds 5 --out docs            # the default pod list, GPUs only
fairlane-eval sharing --trace gpushare100 --cpu --json
fairlane-eval sharing --cpu --rules fgd,fgd-cpu,best-fit   # FGD with and without CPUs

The rules default to all of them, ``fgd-cpu`` (the paper's FGD, which sees the nodes'
free CPUs) only with ``--cpu``: without it no pod takes CPUs, so it would rank as ``fgd``
at three times the cost (its mix has a shape per CPU size).

Per seed one arrival sequence, placed under every rule (paired); progress on stderr, a
table (or ``--json``) on stdout, the chart written under ``--out``. The study itself is
:mod:`fairlane_eval.core.sharing_study`; docs/evaluation.md has the results.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, TextIO

import numpy as np

from fairlane_eval.core.alibaba_gpu import POD_LISTS, pod_mix, shipped_nodes, shipped_pods
from fairlane_eval.core.experiment import Interval
from fairlane_eval.core.sharing_study import (
    CPU_VIEW_RULES,
    STUDY_RULES,
    StudyConfig,
    StudyRule,
    StudyRun,
    draw_arrivals,
    run_study,
)
from fairlane_eval.core.sharing_summary import RuleAtLoad, summarise_study
from fairlane_eval.errors import OptionError
from fairlane_eval.run_command import positive_int
from fairlane_eval.run_output import interval_json

__all__ = ["add_sharing_parser", "sharing_command"]

# The table shows the loads where packing decides something (below, every rule places
# every pod), every tenth of the capacity.
_TABLE_FROM_LOAD = 0.8


def _rules(text: str) -> tuple[StudyRule, ...]:
    names = tuple(name.strip() for name in text.split(",") if name.strip())
    unknown = [name for name in names if name not in STUDY_RULES]
    if unknown or not names:
        known = ", ".join(STUDY_RULES)
        raise argparse.ArgumentTypeError(
            f"unknown rule(s) {', '.join(unknown) or '(none)'}; choose from {known}"
        )
    return tuple(rule for rule in STUDY_RULES if rule in names)


def add_sharing_parser(sub: Any) -> None:
    """Registers ``sharing`` on the CLI's subparsers."""
    sharing = sub.add_parser("sharing", help="fractional-GPU packing on Alibaba's 2023 trace")
    sharing.add_argument("--seeds", type=positive_int, default=5, help="seeds 0..N-1")
    sharing.add_argument("--trace", choices=sorted(POD_LISTS), default="default")
    sharing.add_argument("--cpu", action="store_true", help="pods also need their CPUs")
    sharing.add_argument("--rules", type=_rules, help="comma-separated (default: all)")
    sharing.add_argument(
        "--baseline", choices=STUDY_RULES, default="best-fit", help="the rule others pair with"
    )
    sharing.add_argument("--max-load", type=float, default=1.3, help="arrived GPU demand")
    sharing.add_argument("--step", type=float, default=0.05, help="load between points")
    sharing.add_argument("--out", type=Path, default=Path("docs"), help="chart folder")
    sharing.add_argument("--json", action="store_true", help="results as JSON")


def _chosen_rules(args: argparse.Namespace) -> tuple[StudyRule, ...]:
    if args.rules is not None:
        rules: tuple[StudyRule, ...] = args.rules
        return rules
    return tuple(rule for rule in STUDY_RULES if args.cpu or rule not in CPU_VIEW_RULES)


def _run_all(
    args: argparse.Namespace,
    rules: Sequence[StudyRule],
    config: StudyConfig,
    progress: Callable[[str], None],
) -> dict[str, list[StudyRun]]:
    nodes, pods = shipped_nodes(), shipped_pods(args.trace)
    capacity = sum(node.gpus for node in nodes)
    mixes = {cpu_view: pod_mix(pods, with_cpu=cpu_view) for cpu_view in (False, True)}
    progress(f"{args.trace}: {len(pods)} GPU pods, {len(nodes)} nodes, {capacity} GPUs")
    runs: dict[str, list[StudyRun]] = {rule: [] for rule in rules}
    for seed in range(args.seeds):
        arrivals = draw_arrivals(pods, capacity, config.max_load, np.random.default_rng(seed))
        for rule in rules:
            started = time.process_time()
            mix = mixes[rule in CPU_VIEW_RULES]
            runs[rule].append(
                run_study(nodes, arrivals, mix=mix, rule=rule, seed=seed, config=config)
            )
            elapsed = time.process_time() - started
            progress(f"seed {seed} {rule}: {len(arrivals)} pods, {elapsed:.1f} CPU-s")
    return runs


def _shown(load: float) -> bool:
    return load >= _TABLE_FROM_LOAD - 1e-9 and abs(load * 10 - round(load * 10)) < 1e-6


def _plus_minus(interval: Interval, scale: str) -> str:
    if not math.isfinite(interval.low):
        return format(interval.mean, scale)
    return f"{interval.mean:{scale}} ± {interval.mean - interval.low:{scale}}"


def _table(summary: Mapping[str, Sequence[RuleAtLoad]], baseline: str) -> str:
    lines = [
        "| load | rule | unallocated | free but unusable | failed pods | failed GPU demand "
        f"| unallocated vs {baseline} |",
        "|---|---|---|---|---|---|---|",
    ]
    for at_load in zip(*summary.values(), strict=True):
        for point in at_load:
            if not _shown(point.load):
                continue
            cells = (
                f"{point.load:.0%}",
                point.rule,
                _plus_minus(point.unallocated, ".2%"),
                _plus_minus(point.fragmented, ".2%"),
                _plus_minus(point.failed_pods, ".0f"),
                _plus_minus(point.failed_demand, ".1%"),
                str(point.unallocated_change),
            )
            lines.append(f"| {' | '.join(cells)} |")
    return "\n".join(lines)


def _json(args: argparse.Namespace, summary: Mapping[str, Sequence[RuleAtLoad]]) -> str:
    document = {
        "trace": args.trace,
        "pack_cpu": args.cpu,
        "seeds": args.seeds,
        "baseline": args.baseline,
        "rules": {
            rule: [
                {
                    "load": point.load,
                    "unallocated": interval_json(point.unallocated),
                    "fragmented": interval_json(point.fragmented),
                    "failed_pods": interval_json(point.failed_pods),
                    "failed_demand": interval_json(point.failed_demand),
                    "unallocated_change": interval_json(point.unallocated_change),
                }
                for point in points
            ]
            for rule, points in summary.items()
        },
    }
    return json.dumps(document, allow_nan=False, indent=2)


def sharing_command(args: argparse.Namespace, out: TextIO, progress: Callable[[str], None]) -> int:
    """Runs the study as ``args`` say; the results to ``out``, progress lines to
    ``progress``."""
    from fairlane_eval.charts.sharing import plot_sharing_study

    rules = _chosen_rules(args)
    if args.baseline not in rules:
        raise OptionError(f"--rules must include the baseline {args.baseline}")
    try:
        config = StudyConfig(max_load=args.max_load, load_step=args.step, pack_cpu=args.cpu)
    except ValueError as exc:
        raise OptionError(f"--max-load/--step: {exc}") from None
    summary = summarise_study(_run_all(args, rules, config, progress), args.baseline)
    name = f"eval-sharing-{args.trace}{'-cpu' if args.cpu else ''}.png"
    title = f"Fractional packing, Alibaba 2023 {args.trace} pods{' + CPU' if args.cpu else ''}"
    chart = plot_sharing_study(summary, f"{title}, {args.seeds} seeds", args.out / name)
    progress(f"wrote {chart}")
    print(_json(args, summary) if args.json else _table(summary, args.baseline), file=out)
    return 0
