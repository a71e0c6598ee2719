"""Announces running placements' slow GPUs: each housekeeping round finds the held GPUs
that are slow (core/degraded.py, from the fleet view in memory), looks up only the live
placements that hold them, and has the store record and publish each
new (placement, GPU, source) once, through the outbox. Postgres is the arbiter: a
replica that loses the race, or a restarted one, finds the rows there and says nothing.
"""

from __future__ import annotations

from collections.abc import Callable

from fairlane_events.records import SlowGpu
from fairlane_scheduler.core.degraded import DegradedPolicy, slow_gpus, suspects
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.storage import PlacementStore

__all__ = ["DegradedWatch"]


class DegradedWatch:
    def __init__(
        self,
        *,
        store: PlacementStore,
        fleet: FleetView,
        policy: DegradedPolicy,
        clock_ms: Callable[[], int],
        announced: Callable[[SlowGpu], None] = lambda _: None,
    ) -> None:
        self._store = store
        self._fleet = fleet
        self._policy = policy
        self._clock_ms = clock_ms
        self._announced = announced  # each GPU this replica announced (metrics)
        #: (placement id, GPU, source) known announced, by anyone: not asked again.
        self._known: set[tuple[str, str, str]] = set()

    async def check(self) -> list[SlowGpu]:
        """One round: the slow GPUs this replica announced now."""
        now_ms = self._clock_ms()
        gpus = suspects(self._fleet, self._policy, now_ms)
        if not gpus:
            return []
        found, seen = [], set()
        for placement, job_class in await self._store.live_holding(sorted(gpus)):
            seen.add(placement.id)
            slow = [
                gpu
                for gpu in slow_gpus(self._fleet, placement, job_class, self._policy, now_ms)
                if (placement.id, gpu.uuid, gpu.source) not in self._known
            ]
            if not slow:
                continue
            new = await self._store.record_degraded(placement, slow, now_ms)
            self._known.update((placement.id, gpu.uuid, gpu.source) for gpu in slow)
            for gpu in new:
                self._announced(gpu)
            found.extend(new)
        # What no suspect placement holds now need not be remembered (the store still
        # knows it, should the GPU turn slow again).
        self._known = {known for known in self._known if known[0] in seen}
        return found
