"""Progress from nvidia-resiliency-ext's straggler detector, when a job already runs it.

NVRx's ``straggler.Detector.generate_report()`` returns a ``Report`` whose
``local_kernel_summaries`` hold, per captured CUDA kernel, timing statistics keyed by its
``Statistic`` enum (``MED``, ``NUM``, ...), and ``local_section_summaries`` the same per
user section (``Detector.detection_section(name)``). The detector profiles only some
section runs (its profiling interval), and counts kernels and sections over the same
runs, so one profiled step's GPU time is::

    compute_s_per_step = time_unit_s x sum over kernels k (MED_k x NUM_k) / NUM_section

NCCL kernels (``ncclDev...``, ``ncclKernel...``) are left out: they are the collective
waits that Fairlane's compute time excludes. ``report(...)`` sends it to the launcher as
``NUM_section`` steps of that time, on this process's rank. Use the report of each rank
(``gather_on_rank0=False``); a gathered rank-0 report's relative scores carry no time.

The package is imported only by :func:`detector`, lazily: this module works on any
object with the Report's fields, and without the package installed.
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any, Protocol

from fairlane import progress

__all__ = ["NvrxMissingError", "StragglerReport", "compute_s_per_step", "detector", "report"]

#: NVRx's timings are float milliseconds (CUPTI's nanoseconds / 1e6); pass
#: ``time_unit_s`` if a version says otherwise.
MILLISECOND = 1e-3


class NvrxMissingError(ImportError):
    """nvidia-resiliency-ext is not installed."""


class StragglerReport(Protocol):
    """The fields of ``nvidia_resiliency_ext.straggler.Report`` this adapter reads."""

    @property
    def local_kernel_summaries(self) -> Mapping[str, Mapping[Any, float]]: ...
    @property
    def local_section_summaries(self) -> Mapping[str, Mapping[Any, float]]: ...


def detector() -> Any:
    """NVRx's ``straggler.Detector``, or :class:`NvrxMissingError` saying how to get it."""
    try:
        straggler = importlib.import_module("nvidia_resiliency_ext.straggler")
    except ImportError as exc:
        raise NvrxMissingError(
            "nvidia-resiliency-ext is not installed: `pip install nvidia-resiliency-ext` "
            "(or time sections with fairlane.progress.step())"
        ) from exc
    return straggler.Detector


def _stat(summary: Mapping[Any, float], name: str) -> float | None:
    """A statistic by its name (``Statistic.MED`` or a plain ``"MED"`` key)."""
    for key, value in summary.items():
        if getattr(key, "name", key) == name:
            return float(value)
    return None


def _is_collective(kernel: str) -> bool:
    return "nccl" in kernel.lower()


def compute_s_per_step(
    rep: StragglerReport, section: str, *, time_unit_s: float = MILLISECOND
) -> tuple[float, int] | None:
    """(GPU compute seconds per profiled run of ``section``, profiled runs), or None when
    the report holds no such section or no compute kernel."""
    summary = rep.local_section_summaries.get(section)
    runs = _stat(summary, "NUM") if summary is not None else None
    if not runs:
        return None
    total = 0.0
    for kernel, stats in rep.local_kernel_summaries.items():
        median, count = _stat(stats, "MED"), _stat(stats, "NUM")
        if _is_collective(kernel) or median is None or count is None:
            continue
        total += median * count
    if total <= 0:
        return None
    return total * time_unit_s / runs, int(runs)


def report(
    rep: StragglerReport,
    section: str,
    *,
    time_unit_s: float = MILLISECOND,
    reporter: progress.Reporter | None = None,
) -> bool:
    """Send this rank's compute time per step from ``rep`` to the launcher (through
    ``reporter``, by default the process's own); False when it held nothing to send."""
    found = compute_s_per_step(rep, section, time_unit_s=time_unit_s)
    if found is None:
        return False
    if reporter is None:
        progress.report(*found)
    else:
        reporter.report(*found)
    return True
