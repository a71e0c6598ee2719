"""Announces running placements that hold GPUs without using them (issue 29 item 3).

Every ``check_s`` (a housekeeping round's last step): the idle tracker (core/idle.py,
fed by the scores follower) names the held GPUs idle for the whole window; only the
live placements that hold them are looked up, and each whose GPUs are all idle has its
episode recorded and its ``idle`` event written through the outbox, once, by whichever
replica gets there first. Episodes whose placement reported busy again are closed, and
the leases of announced placements in a namespace with an idle policy are held at most
``idle_lease_s`` after the warning. Nothing is released here: an idle placement ends
only through the lease its namespace's policy shortened.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Protocol

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.idle import IdlePolicy, IdleTracker
from fairlane_scheduler.core.placements import Placement

__all__ = ["IdleHolder", "IdleStore", "IdleWatch"]


@dataclass(frozen=True)
class IdleHolder:
    """A live placement holding a suspect GPU: since when it holds its GPUs, and whether
    its current idle episode was announced (by anyone)."""

    placement: Placement
    held_since_ms: int
    announced: bool


class IdleStore(Protocol):
    async def idle_holders(self, gpus: Collection[str]) -> list[IdleHolder]:
        """The live placements that hold any of ``gpus`` (the committed rows)."""

    async def record_idle(
        self, placement: Placement, idle_since_ms: int, now_ms: int, policy: IdlePolicy
    ) -> bool:
        """Record the placement's idle episode, cap its lease by its namespace's policy
        and write its ``idle`` event, in one transaction; False: the episode was
        recorded before (by anyone) or the placement ended."""

    async def cap_idle_leases(self) -> list[str]:
        """Hold the lease of every announced placement whose namespace has a policy at
        most ``idle_lease_s`` after its announcement; the placements whose lease moved."""

    async def open_episodes(self) -> dict[str, tuple[str, ...]]:
        """Live placements in an announced idle episode, with the GPUs they hold."""

    async def end_episodes(self, busy_ms: Mapping[str, int]) -> None:
        """End the episodes of these placements: a GPU of each reported busy at this
        time (a later episode must begin after it to be announced)."""

    async def idle_lease_s(self, namespace: str) -> float | None: ...

    async def set_idle_lease_s(self, namespace: str, idle_lease_s: float | None) -> None:
        """Set the namespace's policy (None: remove it)."""


class IdleWatch:
    def __init__(
        self,
        *,
        store: IdleStore,
        tracker: IdleTracker,
        fleet: FleetView,
        clock_ms: Callable[[], int],
        check_s: float,
        announced: Callable[[Placement], None] = lambda _: None,
    ) -> None:
        self.store = store
        self.tracker = tracker
        self._fleet = fleet
        self._clock_ms = clock_ms
        self._check_ms = check_s * 1000
        self._next_ms = 0.0
        self._announced = announced  # each placement this replica announced (metrics)
        #: Live placements in an announced idle episode, as of the last round (the
        #: dashboard's mark and the gauge: the same for every replica).
        self.idle: frozenset[str] = frozenset()

    async def check(self) -> list[str]:
        """One round, when due: the placements this replica announced idle now."""
        now_ms = self._clock_ms()
        if now_ms < self._next_ms:
            return []
        self._next_ms = now_ms + self._check_ms
        store, tracker = self.store, self.tracker
        episodes = await store.open_episodes()
        busy = {
            pid: at_ms
            for pid, gpus in episodes.items()
            if (at_ms := tracker.busy_at(gpus, now_ms)) is not None
        }
        if busy:
            await store.end_episodes(busy)
        await store.cap_idle_leases()
        announced: list[str] = []
        suspects = self._held(tracker.idle_gpus(now_ms))
        for holder in await store.idle_holders(suspects) if suspects else []:
            placement = holder.placement
            if holder.announced or placement.id in episodes:
                continue
            gpus = [gpu.uuid for node in placement.nodes for gpu in node.gpus]
            since = tracker.idle_since(gpus, holder.held_since_ms, now_ms)
            if since is None:
                continue
            if await store.record_idle(placement, since, now_ms, tracker.policy):
                self._announced(placement)
                announced.append(placement.id)
        self.idle = frozenset(episodes).difference(busy).union(announced)
        return announced

    def _held(self, gpus: list[str]) -> list[str]:
        """Those of ``gpus`` a live placement holds (idle free GPUs are no one's)."""
        fleet = self._fleet
        return [u for u in gpus if (r := fleet.row.get(u)) is not None and fleet.held[r]]
