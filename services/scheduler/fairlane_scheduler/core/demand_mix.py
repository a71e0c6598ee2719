"""The recent demand a replica sees, as the workload mix the FGD packing rule packs
for (pure): the shapes (GPUs, share per GPU) of the last requests, by frequency.

FGD (core/sharing.py) measures fragmentation against a target workload; the trace's
mix (``DEFAULT_MIX``) stands in until this replica has seen enough requests of its own.
"""

from __future__ import annotations

from collections import Counter, deque

from fairlane_scheduler.core.placements import PlacementRequest
from fairlane_scheduler.core.shares import SHARE_SCALE, share_milli
from fairlane_scheduler.core.sharing import DEFAULT_MIX, MixEntry, ShareAsk, WorkloadMix

__all__ = ["DemandMix"]


class DemandMix:
    """The shapes of the last ``window`` requests; their mix once ``least`` were seen."""

    def __init__(self, window: int = 1000, least: int = 100) -> None:
        self._shapes: deque[tuple[int, int]] = deque(maxlen=window)
        self._counts: Counter[tuple[int, int]] = Counter()
        self._least = least
        self._mix: WorkloadMix | None = None

    def see(self, request: PlacementRequest) -> None:
        """Count ``request``'s shape: one share of one GPU, or whole GPUs per node (a
        gang's node is one shape: the rule places within nodes)."""
        if request.gpu_share is not None:
            shape = (1, share_milli(request.gpu_share))
        else:
            shape = (request.gpus_per_node, SHARE_SCALE)
        if len(self._shapes) == self._shapes.maxlen:
            oldest = self._shapes[0]
            self._counts[oldest] -= 1
            if not self._counts[oldest]:
                del self._counts[oldest]
        self._shapes.append(shape)
        self._counts[shape] += 1
        self._mix = None

    def mix(self) -> WorkloadMix:
        """The recent shapes weighted by count, or the trace's mix before ``least``."""
        if len(self._shapes) < self._least:
            return DEFAULT_MIX
        if self._mix is None:
            entries = sorted(self._counts.items())
            self._mix = WorkloadMix(
                tuple(MixEntry(ShareAsk(milli), gpus, n) for (gpus, milli), n in entries)
            )
        return self._mix
