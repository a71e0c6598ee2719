"""The in-memory twin of the Postgres store, for unit tests of the placement service's
orchestration. It keeps the rules Postgres enforces (one placement per job id and
namespace, no GPU's live shares above a whole GPU or its memory, so no whole GPU in two
live placements, no port twice on a master node, the quota judged on what is
committed, a share as its part of a GPU) and the events each change writes; nothing is durable."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import replace

from fairlane_events.records import PlacementEvent, SlowGpu
from fairlane_scheduler.core.degraded import degraded_event
from fairlane_scheduler.core.ledger import Holding
from fairlane_scheduler.core.master_port import PortRange, next_free_port
from fairlane_scheduler.core.placements import (
    EventKind,
    Placement,
    PlacementRequest,
    placement_event,
    with_master_port,
)
from fairlane_scheduler.core.quota import Quota, check_quota
from fairlane_scheduler.core.shares import SHARE_SCALE, gpus_by_model, slot_milli
from fairlane_scheduler.errors import AllocationConflictError
from fairlane_scheduler.storage import (
    Ending,
    JobTaken,
    NoFreePort,
    NotPending,
    OverQuota,
    WriteOutcome,
    Written,
)

__all__ = ["MemoryStore"]


class MemoryStore:
    def __init__(self) -> None:
        self.placements: dict[str, Placement] = {}
        self.requests: dict[str, PlacementRequest] = {}
        self.events: list[PlacementEvent] = []
        self.quota_rows: dict[str, Quota] = {}
        self.cordons: dict[str, str] = {}
        self.writes = 0  # create and promote calls, to count round trips
        self.batches: list[int] = []  # the size of each create_many call
        self.degraded: set[tuple[str, str, str]] = set()  # placement id, GPU, source

    def _live(self) -> list[Placement]:
        return [p for p in self.placements.values() if p.is_live]

    def _usage(self, namespace: str) -> dict[str, float]:
        used: Counter[str] = Counter()
        for p in self._live():
            if p.namespace == namespace:
                used.update(gpus_by_model(p.nodes, p.gpu_models))
        return dict(used)

    def _overcommits(self, placement: Placement) -> bool:
        """Whether ``placement``'s GPUs would pass a whole GPU's share or (for a shared
        GPU) its memory beside the live placements', as migration 0015's ledger judges."""
        slots = {g.uuid: g for n in placement.nodes for g in n.gpus}
        milli = {uuid: slot_milli(g) for uuid, g in slots.items()}
        memory = {uuid: g.memory_mib or 0 for uuid, g in slots.items()}
        for live in self._live():
            for g in (g for n in live.nodes for g in n.gpus if g.uuid in slots):
                milli[g.uuid] += slot_milli(g)
                memory[g.uuid] += g.memory_mib or 0
        limit = placement.shared_gpu_memory_mib
        return any(m > SHARE_SCALE for m in milli.values()) or (
            limit is not None and any(m > limit for m in memory.values())
        )

    def _admit(self, placement: Placement, ports: PortRange) -> WriteOutcome:
        """Quota, port and GPUs, as fairlane_admit and the unique indexes judge them."""
        quota = self.quota_rows.get(placement.namespace)
        if quota is not None:
            used = self._usage(placement.namespace)
            asked = gpus_by_model(placement.nodes, placement.gpu_models)
            if check_quota(quota, used, asked) is not None:
                return OverQuota(quota, used)
        master = placement.nodes[0]
        taken = {p.nodes[0].master_port for p in self._live() if p.nodes[0].node == master.node}
        port = next_free_port(taken, ports, hint=master.master_port)
        if port is None:
            return NoFreePort()
        if self._overcommits(placement):
            raise AllocationConflictError("a GPU of this placement is live elsewhere")
        return Written(with_master_port(placement, port))

    def _record(self, placement: Placement, kind: EventKind, ts_ms: int) -> None:
        self.placements[placement.id] = placement
        self.events.append(placement_event(placement, kind, ts_ms))

    async def create(
        self, placement: Placement, request: PlacementRequest, ports: PortRange
    ) -> WriteOutcome:
        self.writes += 1
        return self._create(placement, request, ports)

    def _create(
        self, placement: Placement, request: PlacementRequest, ports: PortRange
    ) -> WriteOutcome:
        if self._job(placement.namespace, placement.job_id) is not None:
            return JobTaken()
        outcome: WriteOutcome = Written(placement)
        if placement.is_live:
            outcome = self._admit(placement, ports)
        if isinstance(outcome, Written):
            self.requests[placement.id] = request
            kind: EventKind = "created" if placement.is_live else "pending"
            self._record(outcome.placement, kind, placement.created_at_ms)
        return outcome

    async def create_many(
        self, batch: Sequence[tuple[Placement, PlacementRequest]], ports: PortRange
    ) -> list[WriteOutcome | None]:
        self.writes += 1
        self.batches.append(len(batch))
        outcomes: list[WriteOutcome | None] = []
        for placement, request in batch:
            try:
                outcomes.append(self._create(placement, request, ports))
            except AllocationConflictError:
                outcomes.append(None)
        return outcomes

    async def promote(self, placement: Placement, now_ms: int, ports: PortRange) -> WriteOutcome:
        self.writes += 1
        held = self.placements.get(placement.id)
        if held is None or held.state != "pending":
            return NotPending()
        outcome = self._admit(placement, ports)
        if isinstance(outcome, Written):
            self._record(outcome.placement, "created", now_ms)
        return outcome

    async def end(self, ending: Ending) -> tuple[Placement | None, bool]:
        held = self.placements.get(ending.placement_id)
        if held is None or ending.namespace not in (None, held.namespace):
            return None, False
        if not held.is_open:
            return held, False
        ended = replace(held, state=ending.state, ended_at_ms=ending.now_ms)
        self.placements[ending.placement_id] = ended
        self.events.append(placement_event(ended, ending.state, ending.now_ms, ending.reason))
        return ended, True

    async def end_many(self, endings: Sequence[Ending]) -> list[tuple[Placement | None, bool]]:
        return [await self.end(ending) for ending in endings]

    async def get(self, placement_id: str) -> Placement | None:
        return self.placements.get(placement_id)

    async def find_job(self, namespace: str, job_id: str) -> Placement | None:
        return self._job(namespace, job_id)

    def _job(self, namespace: str, job_id: str) -> Placement | None:
        found = (
            p for p in self.placements.values() if (p.namespace, p.job_id) == (namespace, job_id)
        )
        return next(found, None)

    async def renew(
        self, placement_id: str, now_ms: int, lease_s: float | None
    ) -> Placement | None:
        held = self.placements.get(placement_id)
        lease_s = lease_s if lease_s is not None else self.requests[placement_id].lease_s
        if held is None or not held.is_live or lease_s is None:
            return None
        renewed = replace(held, lease_expires_at_ms=now_ms + round(lease_s * 1000))
        self.placements[placement_id] = renewed
        return renewed

    async def due_for_expiry(self, now_ms: int, limit: int = 100) -> list[str]:
        due = [
            p
            for p in self._live()
            if p.lease_expires_at_ms is not None and p.lease_expires_at_ms <= now_ms
        ]
        return [p.id for p in sorted(due, key=lambda p: p.lease_expires_at_ms or 0)][:limit]

    async def pending(self, limit: int = 100) -> list[tuple[Placement, PlacementRequest]]:
        waiting = [p for p in self.placements.values() if p.state == "pending"]
        waiting.sort(key=lambda p: (-self.requests[p.id].priority, p.created_at_ms))
        return [(p, self.requests[p.id]) for p in waiting[:limit]]

    async def page(
        self, namespace: str | None, state: str | None, limit: int, before_ms: int | None
    ) -> list[Placement]:
        found = [
            p
            for p in self.placements.values()
            if namespace in (None, p.namespace)
            and state in (None, p.state)
            and (before_ms is None or p.created_at_ms < before_ms)
        ]
        return sorted(found, key=lambda p: (-p.created_at_ms, p.id))[:limit]

    async def live_ids(self) -> list[str]:
        return [p.id for p in self._live()]

    async def holdings(self, ids: Collection[str]) -> list[Holding]:
        return [Holding.of(p) for p in self._live() if p.id in ids]

    async def live_holding(self, gpus: Collection[str]) -> list[tuple[Placement, str | None]]:
        wanted = set(gpus)
        return [
            (p, self.requests[p.id].job_class)
            for p in self._live()
            if any(g.uuid in wanted for n in p.nodes for g in n.gpus)
        ]

    async def record_degraded(
        self, placement: Placement, slow: Sequence[SlowGpu], now_ms: int
    ) -> list[SlowGpu]:
        stored = self.placements.get(placement.id)
        if stored is None or not stored.is_live:
            return []
        new = [g for g in slow if (placement.id, g.uuid, g.source) not in self.degraded]
        self.degraded.update((placement.id, g.uuid, g.source) for g in new)
        if new:
            self.events.append(degraded_event(placement, new, now_ms))
        return new

    async def quotas(self) -> dict[str, Quota]:
        return dict(self.quota_rows)

    async def quota_and_usage(self, namespace: str) -> tuple[Quota | None, dict[str, float]]:
        return self.quota_rows.get(namespace), self._usage(namespace)

    async def set_quota(self, namespace: str, quota: Quota) -> None:
        self.quota_rows[namespace] = quota

    async def cordon(self, node: str, reason: str) -> None:
        self.cordons[node] = reason

    async def uncordon(self, node: str) -> None:
        self.cordons.pop(node, None)

    async def cordoned(self) -> dict[str, str]:
        return dict(self.cordons)

    async def backlog(self) -> tuple[int, int]:
        waiting = sum(p.state == "pending" for p in self.placements.values())
        return len(self.events), waiting

    async def ping(self) -> None:
        return None
