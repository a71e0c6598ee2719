"""Charts of the evaluation's results (matplotlib, written as PNG files)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.figure import Figure

from fairlane_eval.core.experiment import Interval
from fairlane_eval.core.timeline import Timeline

__all__ = [
    "plot_gain_vs_rate",
    "plot_jct_cdf",
    "plot_sensitivity",
    "plot_timeline",
    "save_figure",
]


def save_figure(fig: Figure, path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_jct_cdf(jcts: Mapping[str, Sequence[float]], title: str, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, values in jcts.items():
        x = np.sort(np.asarray(values)) / 3600
        ax.plot(x, np.arange(1, len(x) + 1) / len(x), label=name, lw=1.4)
    ax.set_xscale("log")
    ax.set_xlabel("job completion time (h, log scale)")
    ax.set_ylabel("share of jobs")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_gain_vs_rate(
    gains: Mapping[str, Sequence[tuple[float, Interval]]], title: str, path: Path
) -> Path:
    """Mean JCT change vs static against the fail-slow rate scale, with 95 % CIs."""
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for name, points in gains.items():
        rates = [r for r, _ in points]
        means = np.array([i.mean for _, i in points]) * 100
        low = means - np.array([i.low for _, i in points]) * 100
        high = np.array([i.high for _, i in points]) * 100 - means
        ax.errorbar(rates, means, yerr=[low, high], label=name, marker="o", capsize=3, lw=1.2)
    ax.axhline(0, color="black", lw=0.8)
    ax.set_xscale("symlog", linthresh=1)
    ax.set_xlabel("fail-slow rate, x the published default (0 = none)")
    ax.set_ylabel("mean JCT vs static (%), lower is better")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return save_figure(fig, path)


def plot_sensitivity(
    grid: np.ndarray,
    *,
    rows: Sequence[str],
    cols: Sequence[str],
    labels: tuple[str, str],
    title: str,
    path: Path,
) -> Path:
    """A heatmap of mean JCT change vs static (%), one cell per parameter pair."""
    fig, ax = plt.subplots(figsize=(6, 4.5))
    limit = max(1.0, float(np.nanmax(np.abs(grid))) * 100)
    image = ax.imshow(grid * 100, cmap="RdYlGn_r", vmin=-limit, vmax=limit)
    for (i, j), value in np.ndenumerate(grid):
        ax.text(j, i, f"{value:+.1%}", ha="center", va="center", fontsize=9)
    ax.set_xticks(range(len(cols)), cols)
    ax.set_yticks(range(len(rows)), rows)
    ax.set_xlabel(labels[1])
    ax.set_ylabel(labels[0])
    ax.set_title(title, fontsize=10)
    fig.colorbar(image, ax=ax, label="mean JCT vs static (%)")
    return save_figure(fig, path)


def plot_timeline(timeline: Timeline, threshold: float, path: Path) -> Path:
    fig, ax = plt.subplots(figsize=(8, 4.5))
    minutes = np.asarray(timeline.t_s) / 60
    ax.plot(minutes, timeline.true_speed, label="true speed (hidden)", color="black", lw=1.5)
    ax.plot(minutes, timeline.instant, label="instant score", color="tab:orange", lw=0.8)
    ax.plot(minutes, timeline.score, label="decayed score (what the scheduler sees)", lw=1.6)
    ax.axhline(threshold, color="tab:red", ls="--", lw=1, label=f"threshold {threshold}")
    cooling = np.asarray(timeline.cooling, dtype=bool)
    ax.fill_between(
        minutes, 0, 1.05, where=cooling, color="tab:blue", alpha=0.12, label="held out (cooling)"
    )
    ax.set_ylim(0, 1.05)
    ax.set_xlabel("minutes")
    ax.set_ylabel("relative to a healthy GPU")
    ax.set_title(timeline.title, fontsize=10)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")
    return save_figure(fig, path)
