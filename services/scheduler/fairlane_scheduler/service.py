"""Placement orchestration: idempotency, a decision on the live fleet view, and the
write that Postgres arbitrates. Routes call this; it knows nothing of HTTP."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from dataclasses import dataclass, replace

from fairlane_events.records import GpuSlot, NodeAssignment
from fairlane_scheduler.adapters.store import PlacementStore
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.model import Placement, PlacementRequest
from fairlane_scheduler.core.placement import (
    Choice,
    JobShape,
    NoPlacement,
    PlacementPolicy,
    choose,
)
from fairlane_scheduler.core.ports import next_free_port
from fairlane_scheduler.core.quota import QuotaVerdict, models_within_quota
from fairlane_scheduler.errors import (
    AllocationConflictError,
    JobConflictError,
    NoCapacityError,
    NotFoundError,
    NotLiveError,
    NotReadyError,
    QuotaExceededError,
)

__all__ = ["PlacementService", "PortRange"]

_ATTEMPTS = 5  # a lost race with another replica retries on a fresh view


@dataclass(frozen=True)
class PortRange:
    first: int = 29500
    last: int = 29999


class PlacementService:
    def __init__(
        self,
        *,
        store: PlacementStore,
        fleet: FleetView,
        policy: PlacementPolicy,
        ports: PortRange,
        clock_ms: Callable[[], int],
        is_fleet_ready: Callable[[], bool],
    ) -> None:
        self._store = store
        self._fleet = fleet
        self._policy = policy
        self._ports = ports
        self._clock_ms = clock_ms
        self._is_fleet_ready = is_fleet_ready

    async def get(self, placement_id: str, namespace: str | None = None) -> Placement:
        """The placement, if it exists and (when ``namespace`` is given) belongs to it:
        another namespace's placement is reported as not found, not as forbidden."""
        placement = await self._store.get(placement_id)
        if placement is None or namespace not in (None, placement.namespace):
            raise NotFoundError(f"no placement {placement_id}")
        return placement

    async def release(self, placement_id: str, namespace: str | None = None) -> Placement:
        """End a placement and free its GPUs. Idempotent: an ended one is returned as is."""
        await self.get(placement_id, namespace)
        ended = await self._store.end(placement_id, "released", self._clock_ms())
        return ended if ended is not None else await self.get(placement_id)

    async def renew(
        self, placement_id: str, lease_s: float | None, namespace: str | None = None
    ) -> Placement:
        await self.get(placement_id, namespace)
        renewed = await self._store.renew(placement_id, self._clock_ms(), lease_s)
        if renewed is None:
            placement = await self.get(placement_id)
            why = "has no lease" if placement.is_live else f"is {placement.state}"
            raise NotLiveError(f"placement {placement_id} {why}; nothing to renew")
        return renewed

    async def expire_due(self) -> list[Placement]:
        """Expire every live placement whose lease has ended (safe on every replica)."""
        now_ms = self._clock_ms()
        expired = []
        for placement_id in await self._store.due_for_expiry(now_ms):
            ended = await self._store.end(placement_id, "expired", now_ms, "lease not renewed")
            if ended is not None:
                expired.append(ended)
        return expired

    async def place(self, request: PlacementRequest) -> tuple[Placement, bool]:
        """The placement for ``request`` and whether it was created now (False: the original
        placement of an identical earlier request). A request that asked to queue and
        cannot be placed now is stored as pending instead of refused."""
        for _ in range(_ATTEMPTS):
            existing = await self._store.find_job(request.namespace, request.job_id)
            if existing is not None:
                if existing.fingerprint != request.fingerprint:
                    raise JobConflictError(
                        f"job_id {request.job_id!r} already exists in namespace "
                        f"{request.namespace!r} with a different request"
                    )
                return existing, False
            if not self._is_fleet_ready():
                raise NotReadyError("no GPU scores received yet")
            try:
                placement = await self._decide(request)
            except (NoCapacityError, QuotaExceededError) as exc:
                if not request.queue or not exc.retryable:
                    raise
                placement = _waiting(request, self._clock_ms())
            try:
                await self._store.insert(placement, request)
            except AllocationConflictError:
                continue
            return placement, True
        raise NoCapacityError("lost every race for the chosen GPUs; try again", {})

    async def place_pending(self) -> list[Placement]:
        """Place what waits and now fits, by priority then age; a request that fits later
        than one before it is not held back by it (backfill)."""
        if not self._is_fleet_ready():
            return []
        placed = []
        for waiting, request in await self._store.pending():
            try:
                decided = await self._decide(request)
            except NoCapacityError:
                continue
            except QuotaExceededError as exc:
                if not exc.ever:  # the quota shrank below the request: it never will
                    await self._store.end(waiting.id, "failed", self._clock_ms(), str(exc))
                continue
            promoted = replace(decided, id=waiting.id, created_at_ms=waiting.created_at_ms)
            try:
                if await self._store.promote(promoted, self._clock_ms()):
                    placed.append(promoted)
            except AllocationConflictError:
                continue
        return placed

    async def _decide(self, request: PlacementRequest) -> Placement:
        shape = JobShape(
            gpus_per_node=request.gpus_per_node,
            nodes=request.nodes,
            min_gpu_memory_gib=request.min_gpu_memory_gib,
            models=request.models,
            policy=request.policy,
        )
        quota, used = await self._store.quota_and_usage(request.namespace)
        if quota is not None:
            wanted = request.gpus_per_node * request.nodes
            models = models_within_quota(quota, used, shape.models, self._fleet.models, wanted)
            if isinstance(models, QuotaVerdict):
                raise QuotaExceededError.of(models.reason, ever=models.ever)
            shape = replace(shape, models=models)
        allocated = await self._store.live_gpus()
        now_ms = self._clock_ms()
        choice = choose(self._fleet, shape, self._policy, allocated, now_ms)
        if isinstance(choice, NoPlacement):
            raise NoCapacityError(choice.summary(), choice.reasons)
        master = choice.nodes[0].node
        port = next_free_port(
            await self._store.live_ports(master), self._ports.first, self._ports.last
        )
        if port is None:
            raise NoCapacityError(f"no free MASTER_PORT on {master}", {"ports": 1})
        return _placement(request, self._fleet, choice, port, now_ms)


def _waiting(request: PlacementRequest, now_ms: int) -> Placement:
    return Placement(
        id=str(uuid.uuid4()),
        job_id=request.job_id,
        namespace=request.namespace,
        state="pending",
        created_at_ms=now_ms,
        nodes=(),
        fingerprint=request.fingerprint,
    )


def _placement(
    request: PlacementRequest, fleet: FleetView, choice: Choice, port: int, now_ms: int
) -> Placement:
    master = choice.nodes[0].node
    world_size = sum(len(n.rows) for n in choice.nodes)
    assignments = []
    for rank, node in enumerate(choice.nodes):
        rows = sorted(node.rows, key=lambda r: int(fleet.index[r]))
        assignments.append(
            NodeAssignment(
                node=node.node,
                node_rank=rank,
                gpus=[GpuSlot(uuid=fleet.uuids[r], index=int(fleet.index[r])) for r in rows],
                cuda_visible_devices=",".join(str(fleet.index[r]) for r in rows),
                master_addr=master,
                master_port=port,
                world_size=world_size,
            )
        )
    lease_ms = None if request.lease_s is None else now_ms + round(request.lease_s * 1000)
    return Placement(
        id=str(uuid.uuid4()),
        job_id=request.job_id,
        namespace=request.namespace,
        state="placed",
        created_at_ms=now_ms,
        nodes=tuple(assignments),
        fingerprint=request.fingerprint,
        lease_expires_at_ms=lease_ms,
        fallback=choice.fallback,
        gpu_scores={
            fleet.uuids[r]: float(fleet.score[r]) for node in choice.nodes for r in node.rows
        },
        gpu_models={
            fleet.uuids[r]: fleet.models[fleet.model[r]] for node in choice.nodes for r in node.rows
        },
    )
