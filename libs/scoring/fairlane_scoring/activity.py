"""How busy a GPU is, whoever runs on it: the signal behind idle holdings.

The score masks the load of GPUs Fairlane holds (their tenants' doing), so its
components cannot say whether a holding is used at all; the scores topic carries this
number beside them for the scheduler's idle-holdings rule.
"""

from __future__ import annotations

from fairlane_events.fast_samples import AnyGpuSample

__all__ = ["gpu_activity"]


def gpu_activity(sample: AnyGpuSample) -> float | None:
    """max(sm_active, gpu_util_pct / 100) over what the sample reports (None: neither).

    Both must be low for a GPU to count as idle: ``gpu_util`` alone says a kernel ran
    at some point of the interval, ``sm_active`` alone is Hopper and newer."""
    reported = [
        value
        for value in (
            sample.sm_active,
            None if sample.gpu_util_pct is None else sample.gpu_util_pct / 100.0,
        )
        if value is not None
    ]
    return min(1.0, max(reported)) if reported else None
