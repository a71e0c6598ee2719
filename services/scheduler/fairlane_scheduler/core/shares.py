"""Fractional GPUs in integer thousandths (pure): a request's ``gpu_share`` (0 < share
<= 1 of one GPU's compute) is kept and summed as ``share_milli`` (1..1000), so that the
database's per-GPU sum is exact; a whole GPU counts as :data:`SHARE_SCALE`."""

from __future__ import annotations

__all__ = ["SHARE_SCALE", "share_milli"]

#: A whole GPU, in the unit shares are summed in.
SHARE_SCALE = 1000


def share_milli(share: float) -> int:
    """``share`` of one GPU in thousandths, rounded to the nearest (0.25 -> 250)."""
    return round(share * SHARE_SCALE)
