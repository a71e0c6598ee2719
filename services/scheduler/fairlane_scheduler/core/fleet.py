"""The scheduler's view of the fleet: the latest score record of every GPU (pure)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from fairlane_events.records import GpuScore

__all__ = ["FleetView"]


@dataclass
class FleetView:
    """Latest score per GPU uuid, as read from the compacted scores topic.

    A record older (by ``ts_ms``) than the one held is ignored, so replays and
    out-of-order partitions cannot roll a GPU back to an old score.
    """

    gpus: dict[str, GpuScore] = field(default_factory=dict)

    def apply(self, score: GpuScore) -> bool:
        """Take ``score`` if it is newer than what is held; say whether it was taken."""
        held = self.gpus.get(score.uuid)
        if held is not None and held.ts_ms > score.ts_ms:
            return False
        self.gpus[score.uuid] = score
        return True

    def apply_all(self, scores: Iterable[GpuScore]) -> None:
        for score in scores:
            self.apply(score)

    def __len__(self) -> int:
        return len(self.gpus)

    def fresh_count(self, now_ms: int, stale_after_s: float) -> int:
        """GPUs whose latest score is neither flagged stale nor older than stale_after_s."""
        horizon = now_ms - stale_after_s * 1000
        return sum(1 for g in self.gpus.values() if not g.stale and g.ts_ms >= horizon)
