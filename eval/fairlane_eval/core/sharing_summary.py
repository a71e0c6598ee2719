"""The fractional-packing study's runs summarised over seeds (pure): per rule and load,
the mean with a 95 % interval of each measure, and the change of unallocated GPU share
against a baseline rule paired by seed (the same arrivals)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from fairlane_eval.core.experiment import Interval, t_interval
from fairlane_eval.core.sharing_study import LoadPoint, StudyRun

__all__ = ["RuleAtLoad", "summarise_study"]


@dataclass(frozen=True, slots=True)
class RuleAtLoad:
    """One rule at one arrived load, over the seeds. ``unallocated``, ``fragmented`` and
    ``failed_demand`` are shares of the cluster's GPU capacity; ``failed_pods`` a count;
    ``unallocated_change`` is unallocated / the baseline's - 1, paired by seed."""

    rule: str
    load: float
    unallocated: Interval
    fragmented: Interval
    failed_pods: Interval
    failed_demand: Interval
    unallocated_change: Interval


def _point_at(run: StudyRun, load: float) -> LoadPoint:
    return next(point for point in run.points if point.load == load)


def summarise_study(
    runs: Mapping[str, Sequence[StudyRun]], baseline: str
) -> dict[str, list[RuleAtLoad]]:
    """Per rule, its loads in order. ``runs[rule]`` holds one run per seed, the same seeds
    for every rule; ``baseline`` must be one of the rules."""
    base = {run.seed: run for run in runs[baseline]}
    summary: dict[str, list[RuleAtLoad]] = {}
    for rule, rule_runs in runs.items():
        loads = [point.load for point in rule_runs[0].points]
        summary[rule] = []
        for load in loads:
            points = [_point_at(run, load) for run in rule_runs]
            base_points = [_point_at(base[run.seed], load) for run in rule_runs]
            changes = [
                p.unallocated / b.unallocated - 1
                for p, b in zip(points, base_points, strict=True)
                if b.unallocated > 0
            ]
            summary[rule].append(
                RuleAtLoad(
                    rule=rule,
                    load=load,
                    unallocated=t_interval([p.unallocated for p in points]),
                    fragmented=t_interval([p.fragmented for p in points]),
                    failed_pods=t_interval([float(p.failed_pods) for p in points]),
                    failed_demand=t_interval([p.failed_demand for p in points]),
                    unallocated_change=t_interval(changes),
                )
            )
    return summary
