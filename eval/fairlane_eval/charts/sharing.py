"""The fractional-packing study's chart: unallocated and fragmented GPU share and failed
pods against the arrived load, one line per rule with its 95 % band over seeds."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from fairlane_eval.charts.results import save_figure
from fairlane_eval.core.experiment import Interval
from fairlane_eval.core.sharing_summary import RuleAtLoad

__all__ = ["plot_sharing_study"]

# (y label, measure, scale, from load): below ~90 % every packing rule places every
# pod and the unallocated share is just 1 - load, so that panel starts where they part.
_PANELS: tuple[tuple[str, Callable[[RuleAtLoad], Interval], float, float], ...] = (
    ("unallocated GPU capacity (%)", lambda p: p.unallocated, 100.0, 0.85),
    ("free but unusable (FGD's fragmentation, %)", lambda p: p.fragmented, 100.0, 0.0),
    ("failed (pending) pods", lambda p: p.failed_pods, 1.0, 0.0),
)


def _band(
    ax: Axes,
    points: Sequence[RuleAtLoad],
    pick: Callable[[RuleAtLoad], Interval],
    scale: float,
    rule: str,
) -> None:
    loads = np.array([p.load for p in points]) * 100
    values = [pick(p) for p in points]
    mean = np.array([v.mean for v in values]) * scale
    (line,) = ax.plot(loads, mean, label=rule, lw=1.4)
    low = np.array([v.low for v in values]) * scale
    high = np.array([v.high for v in values]) * scale
    if np.isfinite(low).all():
        ax.fill_between(loads, low, high, color=line.get_color(), alpha=0.2, lw=0)


def plot_sharing_study(summary: Mapping[str, Sequence[RuleAtLoad]], title: str, path: Path) -> Path:
    fig, axes = plt.subplots(1, len(_PANELS), figsize=(15, 4.5))
    for ax, (label, pick, scale, from_load) in zip(axes, _PANELS, strict=True):
        for rule, points in summary.items():
            _band(ax, [p for p in points if p.load >= from_load - 1e-9], pick, scale, rule)
        ax.set_xlabel("arrived GPU demand (% of the cluster's GPUs)")
        ax.set_ylabel(label)
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.suptitle(title)
    return save_figure(fig, path)
