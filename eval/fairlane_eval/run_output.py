"""What `fairlane-eval run` prints: a table for people, or the same results as JSON.

Both are built from one :class:`RunResults`: per policy and seed the trial's
:class:`~fairlane_eval.core.metrics.Summary`, and the changes against the baseline paired
by seed. No I/O here: the command writes the text these functions return.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from fairlane_eval.core.cluster_spec import ClusterSpec
from fairlane_eval.core.experiment import Interval, paired_change
from fairlane_eval.core.metrics import METRICS, Summary

__all__ = ["TABLE_METRICS", "RunResults", "interval_json", "results_json", "results_table"]

#: The table's columns after the policy and finished/total, in order.
TABLE_METRICS = (
    "mean_jct_s",
    "p95_jct_s",
    "mean_queue_s",
    "lost_gpu_h",
    "slow_placement_share",
    "utilisation",
    "mean_ftf",
    "worst_namespace_ftf",
)

_SHORT = {
    "mean_jct_s": "mean JCT",
    "p95_jct_s": "p95 JCT",
    "mean_queue_s": "mean queueing",
    "lost_gpu_h": "lost GPU-h",
    "slow_placement_share": "slow placed",
    "utilisation": "utilisation",
    "mean_ftf": "mean rho",
    "worst_namespace_ftf": "worst ns rho",
}


@dataclass(frozen=True)
class RunResults:
    """One `run`: what ran, and each shown policy's summaries per seed."""

    name: str
    jobs: int  # jobs simulated
    unplaceable: int  # jobs left out: no placement could ever take them
    cluster: ClusterSpec
    rate: float
    seeds: tuple[int, ...]
    baseline: str | None  # None: the baseline did not run, no changes
    runs: Mapping[str, Mapping[int, Summary]]  # shown policies, in order


def _mean(runs: Mapping[int, Summary], metric: str) -> float:
    values = [float(getattr(s, metric)) for s in runs.values()]
    return float(np.mean(values)) if values else math.nan


def _change(results: RunResults, metric: str, name: str) -> Interval | None:
    """The paired change of a time metric against the baseline, None where not shown."""
    baseline = results.baseline
    if baseline is None or name == baseline or METRICS[metric][1] != "s":
        return None
    return paired_change(results.runs, metric, name, baseline)


def _cell(value: float, metric: str) -> str:
    unit = METRICS[metric][1]
    if not math.isfinite(value):
        return "n/a"
    if unit == "s":
        return f"{value / 3600:.3f} h"
    if unit == "share":
        return f"{value:.1%}"
    return f"{value:.3f}" if unit == "GPU-h" else f"{value:.2f}"


def _finished(runs: Mapping[int, Summary]) -> str:
    done = _mean(runs, "finished")
    total = max((s.jobs for s in runs.values()), default=0)
    return f"{done:g}/{total}"


def _header(results: RunResults) -> str:
    seeds = results.seeds
    dropped = f" ({results.unplaceable} unplaceable left out)" if results.unplaceable else ""
    against = (
        f"changes paired against {results.baseline}"
        if results.baseline is not None
        else "no baseline run, no changes"
    )
    return (
        f"{results.name}: {results.jobs} jobs{dropped} on {results.cluster.gpus} GPUs, "
        f"fail-slow rate x{results.rate:g}, seeds {seeds[0]}-{seeds[-1]}; {against}"
    )


def results_table(results: RunResults) -> str:
    """A header line, then one row per policy: finished/total, then each metric's mean
    over seeds (times with their paired change against the baseline)."""
    head = ["policy", "finished", *(_SHORT[m] for m in TABLE_METRICS)]
    rows = [head]
    for name, runs in results.runs.items():
        cells = [name, _finished(runs)]
        for metric in TABLE_METRICS:
            text = _cell(_mean(runs, metric), metric)
            change = _change(results, metric, name)
            cells.append(text if change is None else f"{text} ({change})")
        rows.append(cells)
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = [
        "  ".join(
            cell.ljust(width) if i == 0 else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths, strict=True))
        ).rstrip()
        for row in rows
    ]
    return "\n".join([_header(results), *lines])


def _number(value: float | int | str) -> float | int | str | None:
    """JSON has no NaN or infinity: a metric without a value is null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def interval_json(interval: Interval) -> dict[str, object]:
    return {
        "mean": _number(interval.mean),
        "low": _number(interval.low),
        "high": _number(interval.high),
        "seeds": interval.n,
    }


def results_json(results: RunResults) -> str:
    """The same results as the table, machine-readable: every metric of every seed, the
    means over seeds, and the paired changes against the baseline (null values where a
    metric has none, e.g. no job finished)."""
    metrics: Sequence[str] = tuple(METRICS)
    policies = []
    for name, runs in results.runs.items():
        changes = {m: _change(results, m, name) for m in metrics}
        policies.append(
            {
                "policy": name,
                "mean": {m: _number(_mean(runs, m)) for m in ("finished", *metrics)},
                "change": {m: interval_json(c) for m, c in changes.items() if c is not None},
                "seeds": {
                    str(seed): {k: _number(v) for k, v in summary.as_dict().items()}
                    for seed, summary in sorted(runs.items())
                },
            }
        )
    document = {
        "name": results.name,
        "jobs": results.jobs,
        "unplaceable": results.unplaceable,
        "gpus": results.cluster.gpus,
        "cluster": [
            {"model": g.model, "nodes": g.nodes, "gpus_per_node": g.gpus_per_node}
            for g in results.cluster.groups
        ],
        "rate": results.rate,
        "seeds": list(results.seeds),
        "baseline": results.baseline,
        "units": {m: METRICS[m][1] for m in metrics},
        "policies": policies,
    }
    return json.dumps(document, allow_nan=False, indent=2)
