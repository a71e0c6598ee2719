"""The straggler check as a chart and a few lines of numbers (docs/evaluation-straggler.md).

    .venv/bin/python -m fairlane_eval.charts.straggler docs

reads the shipped PAI mini-batch data, prints the numbers the document quotes and writes
``docs/eval-straggler.png``. The step model is an argument; by default the simulator's,
a synchronous job steps at its slowest worker (``max``).
"""

from __future__ import annotations

import sys
from importlib import resources
from pathlib import Path

import matplotlib as mpl

mpl.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.ticker import PercentFormatter

from fairlane_eval.core.straggler import (
    BYTEDANCE_SLOWDOWN,
    CovTrace,
    JobStragglers,
    StepModel,
    WorkerTimes,
    cov_stragglers,
    gang_over_median,
    job_stragglers,
    longest_episode,
    parse_cov_table,
    parse_worker_times,
    simulated_gang,
)
from fairlane_eval.core.straggler_formulas import cov_ceiling, one_straggler_cov

__all__ = ["CHART_NAME", "SEED", "read_pai_minibatch", "straggler_report", "write_straggler_chart"]

CHART_NAME = "eval-straggler.png"
SEED = 8  # of the simulated gangs' speed draws
GANG, DRAWS = 10, 20_000  # PAI's jobs have ten workers
_JOBS = ("job_1", "job_2", "job_3", "job_4")


def read_pai_minibatch() -> tuple[tuple[WorkerTimes, ...], tuple[CovTrace, ...]]:
    """The four per-worker jobs and the 100 jobs' CoV traces shipped with the package."""
    folder = resources.files("fairlane_eval").joinpath("data", "pai_minibatch")
    jobs = tuple(parse_worker_times(folder.joinpath(f"{j}_norm.csv").read_text(), j) for j in _JOBS)
    return jobs, parse_cov_table(folder.joinpath("coefficient_variation.csv").read_text())


def _job_line(wt: WorkerTimes, s: JobStragglers) -> str:
    q, e = s.slowest_over_median, longest_episode(wt)
    return (
        f"{s.job}: gpu {wt.gpu_request_pct}% samples {s.samples} (+{wt.partial_samples}"
        f" partial) | slowest/median p50 {q.p50:.3f} p90 {q.p90:.3f} p99 {q.p99:.3f}"
        f" max {q.max:.2f} slowest/2nd {s.slowest_over_second:.3f}"
        f" | model/median {s.model_over_median:.3f}"
        f" mean/median {s.mean_over_median:.3f} model/mean {s.model_over_mean:.3f}"
        f" barrier violations {s.barrier_violations} | >=1.97x {s.share_at_bytedance:.3f}"
        f" | slowest top1 {s.slowest_top1_share:.3f} top2 {s.slowest_top2_share:.3f}"
        f" repeat {s.slowest_repeat_share:.3f} halves rho {s.halves_rank_corr:.2f}"
        f" | CoV {s.median_cov:.3f} (max/mean-1)/CoV {s.cov_to_excess:.2f}"
        + (
            " | no worker ever 1.2x slower than usual"
            if e is None
            else f" | longest episode w{e.worker} at {e.start_s} s for {e.duration_s} s"
            f" peak x{e.peak_over_usual:.2f}"
        )
    )


def straggler_report(model: StepModel = max) -> str:
    """The numbers docs/evaluation-straggler.md quotes."""
    jobs, covs = read_pai_minibatch()
    lines = [_job_line(wt, job_stragglers(wt, model)) for wt in jobs]
    c = cov_stragglers(covs, GANG)
    q, (low, high) = c.job_median_cov, c.median_job_max_over_mean
    lines.append(
        f"CoV: {c.jobs} jobs {c.values} values | job median CoV p25 {q.p25:.3f}"
        f" p50 {q.p50:.3f} p75 {q.p75:.3f} p90 {q.p90:.3f} | values > 3.0:"
        f" {c.above_population_ceiling} | CoV >= one 1.97x straggler's"
        f" ({one_straggler_cov(BYTEDANCE_SLOWDOWN, GANG):.3f}): jobs {c.jobs_at_bytedance:.2f}"
        f" values {c.values_at_bytedance:.3f} | median job as one straggler"
        f" {c.median_job_one_straggler:.3f}, max/mean in [{low:.3f}, {high:.3f}]"
        f" | lag-1 autocorrelation {c.lag1_autocorr:.2f}"
    )
    g = simulated_gang(np.random.default_rng(SEED), GANG, DRAWS, model)
    r = g.model_over_median
    lines.append(
        f"simulator: {g.gang} GPUs from PAL's spread, no episodes (seed {SEED}, {g.draws}"
        f" draws) | model/median p50 {r.p50:.3f} p90 {r.p90:.3f} p99 {r.p99:.3f}"
        f" | CoV {g.median_cov:.3f}"
    )
    return "\n".join(lines)


def _ecdf(
    ax: Axes, values: npt.NDArray[np.float64], label: str, color: str | None = None, ls: str = "-"
) -> None:
    x = np.sort(values)
    ax.step(x, np.arange(1, len(x) + 1) / len(x), where="post", label=label, color=color, ls=ls)


def write_straggler_chart(out_dir: Path, model: StepModel = max) -> Path:
    """Write ``eval-straggler.png`` into ``out_dir`` and return its path."""
    jobs, covs = read_pai_minibatch()
    stats = [job_stragglers(wt, model) for wt in jobs]
    ratios, gang_cov = gang_over_median(np.random.default_rng(SEED), GANG, DRAWS, model)
    names = [wt.job for wt in jobs]
    x = np.arange(len(jobs))
    fig, axes = plt.subplots(2, 2, figsize=(12, 8.5))
    ax_cdf, ax_pay, ax_who, ax_cov = axes.ravel()
    fig.suptitle("The straggler model against Alibaba PAI v2020 mini-batch times")

    for wt in jobs:
        m = wt.array()
        _ecdf(ax_cdf, m.max(axis=1) / np.median(m, axis=1) - 1, f"PAI {wt.job}")
    _ecdf(ax_cdf, ratios - 1, "simulator: 10 GPUs, PAL spread", color="k", ls="--")
    ax_cdf.axvline(BYTEDANCE_SLOWDOWN - 1, color="grey", ls=":", label="ByteDance 1.97x")
    ax_cdf.set_xscale("log")
    ax_cdf.xaxis.set_major_formatter(PercentFormatter(1.0, decimals=0))
    ax_cdf.set_xlabel("slowest worker's excess over the median worker, per 10 s sample")
    ax_cdf.set_ylabel("share of samples")
    ax_cdf.set_title("How much slower the slowest worker is", fontsize=10)
    ax_cdf.legend(fontsize=8, loc="lower right")

    for offset, label, values in (
        (-0.2, "mean of the workers", [s.mean_over_median for s in stats]),
        (0.2, "simulator: the slowest worker", [s.model_over_median for s in stats]),
    ):
        bars = ax_pay.bar(x + offset, values, 0.4, label=label)
        ax_pay.bar_label(bars, fmt="%.2f", fontsize=8)
    ax_pay.axhline(
        float(np.median(ratios)),
        color="k",
        ls="--",
        lw=1,
        label="simulator on PAL spread (median gang)",
    )
    ax_pay.set_xticks(x, names)
    ax_pay.set_ylim(0.8, 3.0)
    ax_pay.set_ylabel("job step / median worker's, over the job")
    ax_pay.set_title("What each step model charges the job", fontsize=10)
    ax_pay.legend(fontsize=8, loc="upper left")

    bottom = np.zeros(len(jobs))
    for w in range(jobs[0].array().shape[1]):
        share = np.array([np.mean(wt.array().argmax(axis=1) == w) for wt in jobs])
        ax_who.bar(x, share, bottom=bottom, label=f"worker {w}", color=f"C{w}")
        bottom += share
    ax_who.set_xticks(x, names)
    ax_who.set_ylabel("share of samples")
    ax_who.set_title("Which worker is the slowest", fontsize=10)
    ax_who.legend(fontsize=7, ncols=2, loc="center left", bbox_to_anchor=(1.0, 0.5))

    _ecdf(ax_cov, np.array([np.median(t.cov) for t in covs]), "PAI: 100 jobs, median CoV")
    ax_cov.axvline(float(np.median(gang_cov)), color="k", ls="--", label="simulator: PAL spread")
    ax_cov.axvline(
        one_straggler_cov(BYTEDANCE_SLOWDOWN, GANG),
        color="grey",
        ls=":",
        label="one worker 1.97x slower",
    )
    ax_cov.axvline(
        cov_ceiling(GANG, ddof=0),
        color="tab:red",
        ls="-.",
        lw=0.8,
        label="ceiling of a 1/N CoV (3.0)",
    )
    ax_cov.set_xscale("log")
    ax_cov.set_xlabel("CoV of the workers' mini-batch times")
    ax_cov.set_ylabel("share of jobs")
    ax_cov.set_title("How spread 100 more jobs' workers are", fontsize=10)
    ax_cov.legend(fontsize=8, loc="lower right")

    fig.text(
        0.01,
        0.005,
        "Data: alibaba/clusterdata cluster-trace-gpu-v2020 mini-batch-time (Weng et al., NSDI'22),"
        " CC BY 4.0; per-GPU spread: PAL's 336 V100s (hal-uw/blox-pal, MIT).",
        fontsize=7,
    )
    fig.tight_layout(rect=(0, 0.02, 1, 1))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / CHART_NAME
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


if __name__ == "__main__":
    print(straggler_report())
    print(write_straggler_chart(Path(sys.argv[1] if len(sys.argv) > 1 else "docs")))
