"""The in-memory twin of the Postgres idle store (adapters/idle_store.py), for unit tests
of the idle watch's orchestration. It keeps what migration 0016 and its statements
enforce — one announcement per episode, only for a live placement, the lease held at
most ``idle_lease_s`` after the announcement where the namespace has a policy — over the
placements of an in-memory placement store, and writes its events there."""

from __future__ import annotations

from collections.abc import Collection
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
        self.announced_ms: dict[str, int] = {}  # placement id -> when its episode was
        self.policies: dict[str, float] = {}  # namespace -> idle_lease_s

    def _live(self, placement_id: str) -> Placement | None:
        placement = self._store.placements.get(placement_id)
        return placement if placement is not None and placement.is_live else None

    def _cap(self, placement_id: str) -> int | None:
        """The lease held to its policy's end; the new end when it moved, else None."""
        placement = self._live(placement_id)
        if placement is None or (lease_s := self.policies.get(placement.namespace)) is None:
            return None
        end_ms = self.announced_ms[placement_id] + int(lease_s * 1000)
        lease = placement.lease_expires_at_ms
        if lease is not None and lease <= end_ms:
            return None
        self._store.placements[placement_id] = replace(placement, lease_expires_at_ms=end_ms)
        return end_ms

    async def idle_holders(self, gpus: Collection[str]) -> list[IdleHolder]:
        wanted = set(gpus)
        return [
            IdleHolder(p, p.created_at_ms, p.id in self.announced_ms)
            for p in self._store.placements.values()
            if p.is_live and wanted.intersection(_gpus(p))
        ]

    async def record_idle(
        self, placement: Placement, idle_since_ms: int, now_ms: int, policy: IdlePolicy
    ) -> bool:
        if placement.id in self.announced_ms or self._live(placement.id) is None:
            return False
        self.announced_ms[placement.id] = now_ms
        lease_ms = self._cap(placement.id)
        self._store.events.append(idle_event(placement, idle_since_ms, now_ms, policy, lease_ms))
        return True

    async def cap_idle_leases(self) -> list[str]:
        return [pid for pid in list(self.announced_ms) if self._cap(pid) is not None]

    async def open_episodes(self) -> dict[str, tuple[str, ...]]:
        return {
            pid: _gpus(placement)
            for pid in self.announced_ms
            if (placement := self._live(pid)) is not None
        }

    async def end_episodes(self, placement_ids: Collection[str]) -> None:
        for pid in placement_ids:
            self.announced_ms.pop(pid, None)

    async def idle_lease_s(self, namespace: str) -> float | None:
        return self.policies.get(namespace)

    async def set_idle_lease_s(self, namespace: str, idle_lease_s: float | None) -> None:
        if idle_lease_s is None:
            self.policies.pop(namespace, None)
        else:
            self.policies[namespace] = idle_lease_s
