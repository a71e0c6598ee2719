"""The evaluation report's sensitivity section: how Fairlane's gain over the baseline
moves with the score's and the scheduler's settings (threshold, recent weight, history
and stabilization windows), as two heat maps."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np

from fairlane_eval.charts.results import plot_sensitivity
from fairlane_eval.core.experiment import Setup, paired_change
from fairlane_eval.runner import Trial, run_trials

__all__ = ["sensitivity_section"]


def sensitivity_section(
    base: Setup, baseline: str, rate: float, seeds: range, out: Path
) -> list[str]:
    """The report's sensitivity section: fairlane-fastest's mean JCT against ``baseline``
    over two grids of settings, at ``rate`` x the base setup's fault rate; it writes the
    two heat-map charts into ``out`` and returns the section's lines."""
    base = base.with_(faults=base.faults.scaled(rate))
    thresholds = (0.5, 0.65, 0.8)
    recents = (0.5, 0.7, 0.9)
    histories = (300.0, 600.0, 1200.0)
    windows = (0.0, 120.0, 600.0)

    def with_score(setup: Setup, **changes: float) -> Setup:
        score_changes: dict[str, Any] = {k: v for k, v in changes.items() if k != "stabilization_s"}
        config = replace(setup.config, score=replace(setup.config.score, **score_changes))
        if "stabilization_s" in changes:
            config = replace(config, stabilization_s=changes["stabilization_s"])
        return setup.with_(config=config)

    pairs = {
        "threshold x recent weight": [
            (r, c, with_score(base, threshold=r, recent_weight=c))
            for r, c in itertools.product(thresholds, recents)
        ],
        "history window x stabilization window": [
            (r, c, with_score(base, history_s=r, recent_window_s=min(300.0, r), stabilization_s=c))
            for r, c in itertools.product(histories, windows)
        ],
    }
    trials = [Trial(base, baseline, s) for s in seeds]
    for cases in pairs.values():
        trials += [Trial(setup, "fairlane-fastest", s) for _, _, setup in cases for s in seeds]
    results = run_trials(trials, label="sensitivity")
    static = {t.seed: s for t, s in results.items() if t.policy == baseline}
    lines = [
        f"## Sensitivity ({base.name}, fairlane-fastest, rate x{rate:g}, seeds 0-{len(seeds) - 1})",
        "",
    ]
    for title, cases in pairs.items():
        rows = sorted({r for r, _, _ in cases})
        cols = sorted({c for _, c, _ in cases})
        grid = np.full((len(rows), len(cols)), math.nan)
        for r, c, setup in cases:
            runs = {
                "fairlane-fastest": {t.seed: s for t, s in results.items() if t.setup == setup},
                baseline: static,
            }
            change = paired_change(runs, "mean_jct_s", "fairlane-fastest", baseline)
            grid[rows.index(r), cols.index(c)] = change.mean
            lines.append(f"- {title}: {r:g} x {c:g}: mean JCT vs static {change}")
        labels = tuple(title.split(" x ", 1))
        slug = title.split()[0]
        chart = plot_sensitivity(
            grid,
            rows=[f"{r:g}" for r in rows],
            cols=[f"{c:g}" for c in cols],
            labels=(labels[0], labels[1]),
            title=f"{title}: mean JCT vs static",
            path=out / f"eval-sensitivity-{slug}.png",
        )
        lines += ["", f"![sensitivity, {title}]({chart.name})", ""]
    return lines
