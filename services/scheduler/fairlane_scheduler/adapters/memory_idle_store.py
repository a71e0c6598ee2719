"""The in-memory twin of the Postgres idle store (adapters/idle_store.py), for unit tests
of the idle watch's orchestration. It keeps what migration 0016 and its statements
enforce — one announcement per episode, only for a live placement, the lease held at
most ``idle_lease_s`` after the announcement where the namespace has a policy — over the
placements of an in-memory placement store, and writes its events there."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import replace

from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.core.idle import IdlePolicy, idle_event
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.idle_watch import IdleHolder

__all__ = ["MemoryIdleStore"]


def _gpus(placement: Placement) -> tuple[str, ...]:
    return tuple(sorted(g.uuid for n in placement.nodes for g in n.gpus))


class MemoryIdleStore:
    def __init__(self, store: MemoryStore) -> None:
        self._store = store
        #: placement id -> its last episode: when announced, and when it ended (busy)
        self.episodes: dict[str, tuple[int, int | None]] = {}
        self.policies: dict[str, float] = {}  # namespace -> idle_lease_s

    def _open(self) -> dict[str, int]:
        """Placement id -> when its open episode was announced."""
        return {pid: at for pid, (at, ended) in self.episodes.items() if ended is None}

    def _live(self, placement_id: str) -> Placement | None:
        placement = self._store.placements.get(placement_id)
        return placement if placement is not None and placement.is_live else None

    def _cap(self, placement_id: str) -> int | None:
        """The lease held to its policy's end; the new end when it moved, else None."""
        placement = self._live(placement_id)
        announced_ms = self._open().get(placement_id)
        if placement is None or announced_ms is None:
            return None
        if (lease_s := self.policies.get(placement.namespace)) is None:
            return None
        end_ms = announced_ms + int(lease_s * 1000)
        lease = placement.lease_expires_at_ms
        if lease is not None and lease <= end_ms:
            return None
        self._store.placements[placement_id] = replace(placement, lease_expires_at_ms=end_ms)
        return end_ms

    async def idle_holders(self, gpus: Collection[str]) -> list[IdleHolder]:
        wanted = set(gpus)
        return [
            IdleHolder(p, p.created_at_ms, p.id in self._open())
            for p in self._store.placements.values()
            if p.is_live and wanted.intersection(_gpus(p))
        ]

    async def record_idle(
        self, placement: Placement, idle_since_ms: int, now_ms: int, policy: IdlePolicy
    ) -> bool:
        _, ended_ms = self.episodes.get(placement.id, (0, 0))
        if ended_ms is None or ended_ms >= idle_since_ms or self._live(placement.id) is None:
            return False  # open, or the last one ended after this one began
        self.episodes[placement.id] = (now_ms, None)
        lease_ms = self._cap(placement.id)
        self._store.events.append(idle_event(placement, idle_since_ms, now_ms, policy, lease_ms))
        return True

    async def cap_idle_leases(self) -> list[str]:
        return [pid for pid in self._open() if self._cap(pid) is not None]

    async def open_episodes(self) -> dict[str, tuple[str, ...]]:
        return {
            pid: _gpus(placement)
            for pid in self._open()
            if (placement := self._live(pid)) is not None
        }

    async def end_episodes(self, busy_ms: Mapping[str, int]) -> None:
        open_ = self._open()
        for pid, at_ms in busy_ms.items():
            if pid in open_:
                self.episodes[pid] = (open_[pid], at_ms)

    async def idle_lease_s(self, namespace: str) -> float | None:
        return self.policies.get(namespace)

    async def set_idle_lease_s(self, namespace: str, idle_lease_s: float | None) -> None:
        if idle_lease_s is None:
            self.policies.pop(namespace, None)
        else:
            self.policies[namespace] = idle_lease_s
