"""Placement orchestration: a decision on the in-memory view (fleet scores and the
ledger of what live placements hold), then one write that Postgres arbitrates.
Routes call this; it knows nothing of HTTP or of which store it writes to."""

from __future__ import annotations

import uuid
from collections.abc import Callable, Collection
from dataclasses import replace

from fairlane_scheduler.core.decision import SUMMARIES_FROM_NODES, decide
from fairlane_scheduler.core.demand_mix import DemandMix
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.ledger import Holding, Ledger
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import EventKind, Placement, PlacementRequest, waiting
from fairlane_scheduler.core.quota import Quota, check_quota
from fairlane_scheduler.core.shares import gpus_by_model
from fairlane_scheduler.core.sharing import SharingRule
from fairlane_scheduler.errors import (
    AllocationConflictError,
    JobConflictError,
    NoCapacityError,
    NotFoundError,
    NotLiveError,
    NotReadyError,
    QuotaExceededError,
)
from fairlane_scheduler.group_commit import BATCH_MAX, GroupCommit, GroupEnd
from fairlane_scheduler.storage import (
    Ending,
    JobTaken,
    NoFreePort,
    OverQuota,
    PlacementStore,
    WriteOutcome,
    Written,
)

__all__ = ["PlacementService"]

_ATTEMPTS = 5  # a lost race with another replica retries on a resynchronised view


def _new_id() -> str:
    return str(uuid.uuid4())


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
        new_id: Callable[[], str] = _new_id,
        batch_max: int = BATCH_MAX,  # a write this full leaves at once
        summaries_from_nodes: int = SUMMARIES_FROM_NODES,
        sharing_rule: SharingRule = "fgd",
    ) -> None:
        self._store = store
        self._fleet = fleet
        self._policy = policy
        self._ports = ports
        self._clock_ms = clock_ms
        self._is_fleet_ready = is_fleet_ready
        self._new_id = new_id
        self.ledger = Ledger(fleet)
        #: The fleet per node, ranked per request shape, for this policy's decisions from
        #: summaries_from_nodes nodes up.
        self.rankings = NodeRankings()
        self._summaries_from_nodes = summaries_from_nodes
        self._sharing_rule = sharing_rule
        #: The shapes this replica was asked for lately: what fractional packing keeps
        #: whole GPUs free for.
        self.demand = DemandMix()
        self._commits = GroupCommit(store, ports, batch_max)
        self._ends = GroupEnd(store, batch_max)
        self._quotas: dict[str, Quota] = {}
        self.conflicts = 0  # writes Postgres refused for a GPU or port (then retried)

    @property
    def group_commits(self) -> tuple[int, int]:
        """Placement writes issued so far, and the placements they carried."""
        return self._commits.batches, self._commits.items

    @property
    def group_ends(self) -> tuple[int, int]:
        """Release and expiry writes issued so far, and the endings they carried."""
        return self._ends.batches, self._ends.items

    @property
    def allocated(self) -> Collection[str]:
        """GPUs live placements hold or this replica is writing (a live view)."""
        return self.ledger.gpus

    async def resync(self) -> None:
        """Read what every replica committed: live holdings (those the ledger does not
        know yet), quotas, cordons."""
        since = self.ledger.seq
        live = await self._store.live_ids()
        unknown = self.ledger.unknown(live)
        holdings = await self._store.holdings(unknown) if unknown else []
        self.ledger.replace(live, holdings, since)
        self._quotas = await self._store.quotas()
        self._set_cordoned(await self._store.cordoned())

    async def place(self, request: PlacementRequest) -> tuple[Placement, bool]:
        """The placement for ``request`` and whether it was created now (False: the original
        placement of an identical earlier request). A request that asked to queue and
        cannot be placed now is stored as pending instead of refused."""
        queued = False
        self.demand.see(request)
        for _ in range(_ATTEMPTS):
            if queued:
                placement = waiting(request, self._new_id(), self._clock_ms())
            else:
                try:
                    placement = await self._decision(request)
                except (NoCapacityError, QuotaExceededError, NotReadyError) as exc:
                    # An identical request placed before is answered even when nothing fits.
                    if (replayed := await self._replay(request)) is not None:
                        return replayed, False
                    if isinstance(exc, NotReadyError) or not request.queue or not exc.retryable:
                        raise
                    queued = True
                    continue
            outcome = await self._write(placement, request)
            if isinstance(outcome, Written):
                return outcome.placement, True
            if isinstance(outcome, JobTaken):
                if (replayed := await self._replay(request)) is not None:
                    return replayed, False
            elif isinstance(outcome, OverQuota):
                refusal = self._refusal(request.namespace, placement, outcome)
                if not request.queue or not refusal.retryable:
                    raise refusal
                queued = True
        raise NoCapacityError("lost every race for the chosen GPUs; try again", {})

    async def place_pending(self) -> list[Placement]:
        """Place what waits and now fits, by priority then age; a request that fits later
        than one before it is not held back by it (backfill)."""
        if not self._is_fleet_ready():
            return []
        placed = []
        for waited, request in await self._store.pending():
            try:
                decided = self._decide(request, waited.id)
            except NoCapacityError:
                continue
            except QuotaExceededError as exc:
                if not exc.ever:  # the quota shrank below the request: it never will
                    await self._end(waited.id, "failed", str(exc))
                continue
            promoted = replace(decided, created_at_ms=waited.created_at_ms)
            outcome = await self._write(promoted, None)
            if isinstance(outcome, Written):
                placed.append(outcome.placement)
            elif isinstance(outcome, OverQuota):
                refusal = self._refusal(request.namespace, promoted, outcome)
                if not refusal.retryable:
                    await self._end(waited.id, "failed", str(refusal))
        return placed

    async def get(self, placement_id: str, namespace: str | None = None) -> Placement:
        """The placement, if it exists and (when ``namespace`` is given) belongs to it:
        another namespace's placement is reported as not found, not as forbidden."""
        placement = await self._store.get(placement_id)
        if placement is None or namespace not in (None, placement.namespace):
            raise NotFoundError(f"no placement {placement_id}")
        return placement

    async def release(self, placement_id: str, namespace: str | None = None) -> Placement:
        """End a placement and free its GPUs. Idempotent: an ended one is returned as is."""
        placement = await self._end(placement_id, "released", None, namespace)
        if placement is None:
            raise NotFoundError(f"no placement {placement_id}")
        return placement

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
        expired = []
        for placement_id in await self._store.due_for_expiry(self._clock_ms()):
            placement = await self._end(placement_id, "expired", "lease not renewed")
            if placement is not None and placement.state == "expired":
                expired.append(placement)
        return expired

    async def page(
        self, namespace: str | None, state: str | None, limit: int, before_ms: int | None
    ) -> list[Placement]:
        return await self._store.page(namespace, state, limit, before_ms)

    async def queue(self, limit: int) -> list[Placement]:
        """Waiting placements in the order they will be placed."""
        return [waited for waited, _ in await self._store.pending(limit)]

    async def quota(self, namespace: str) -> tuple[Quota, dict[str, float]]:
        """The namespace's quota (no row: no limit) and what it holds, from Postgres."""
        quota, used = await self._store.quota_and_usage(namespace)
        return quota or Quota(), used

    async def set_quota(self, namespace: str, quota: Quota) -> None:
        await self._store.set_quota(namespace, quota)
        self._quotas[namespace] = quota

    async def cordon(self, node: str, reason: str) -> None:
        await self._store.cordon(node, reason)
        self._set_cordoned(await self._store.cordoned())

    async def uncordon(self, node: str) -> None:
        await self._store.uncordon(node)
        self._set_cordoned(await self._store.cordoned())

    def _set_cordoned(self, nodes: Collection[str]) -> None:
        """A new set only when it changed: the per-node summaries re-read every node's
        stamp when the set is replaced (core/node_summary.py)."""
        if (cordoned := frozenset(nodes)) != self._fleet.cordoned:
            self._fleet.cordoned = cordoned

    async def ping(self) -> None:
        await self._store.ping()

    async def backlog(self) -> tuple[int, int]:
        return await self._store.backlog()

    async def _decision(self, request: PlacementRequest) -> Placement:
        if not self._is_fleet_ready():
            raise NotReadyError("no GPU scores received yet")
        try:
            return self._decide(request, self._new_id())
        except QuotaExceededError:
            await self.resync()  # a refusal must stand on what is committed now
            return self._decide(request, self._new_id())

    def _decide(self, request: PlacementRequest, placement_id: str) -> Placement:
        """Decide on the in-memory view and reserve what was chosen, in one step (no
        await): concurrent requests of this replica never choose the same GPUs."""
        placement = decide(
            request,
            fleet=self._fleet,
            rankings=self.rankings,
            ledger=self.ledger,
            quota=self._quotas.get(request.namespace),
            policy=self._policy,
            ports=self._ports,
            placement_id=placement_id,
            now_ms=self._clock_ms(),
            summaries_from_nodes=self._summaries_from_nodes,
            mix=self.demand.mix(),
            rule=self._sharing_rule,
        )
        self.ledger.reserve(Holding.of(placement))
        return placement

    async def _write(
        self, placement: Placement, request: PlacementRequest | None
    ) -> WriteOutcome | None:
        """Create (``request`` given) or promote; the reservation ends either way, a
        committed placement joins the ledger. None: Postgres refused the GPUs or port
        (another replica's) and the view was resynchronised."""
        try:
            if request is None:
                outcome = await self._store.promote(placement, self._clock_ms(), self._ports)
            elif placement.shared_gpu_memory_mib is not None:
                # A share is written alone: its allocation row carries the share, which
                # the batch statement's arrays do not (migration 0015).
                outcome = await self._store.create(placement, request, self._ports)
            else:
                outcome = await self._commits.create(placement, request)
            if isinstance(outcome, Written) and outcome.placement.is_live:
                self.ledger.commit(Holding.of(outcome.placement))  # takes the reservation over
        except AllocationConflictError:
            outcome = None
        finally:
            self.ledger.unreserve(placement.id)  # nothing left to do once committed
        if outcome is None or isinstance(outcome, NoFreePort):
            self.conflicts += 1
            await self.resync()
        return outcome

    def _refusal(self, namespace: str, placement: Placement, over: OverQuota) -> QuotaExceededError:
        self._quotas[namespace] = over.quota
        wanted = gpus_by_model(placement.nodes, placement.gpu_models)
        verdict = check_quota(over.quota, over.used, wanted)
        reason = verdict.reason if verdict else "quota: taken by a concurrent placement"
        return QuotaExceededError.of(reason, ever=verdict.ever if verdict else True)

    async def _replay(self, request: PlacementRequest) -> Placement | None:
        existing = await self._store.find_job(request.namespace, request.job_id)
        if existing is not None and existing.fingerprint != request.fingerprint:
            raise JobConflictError(
                f"job_id {request.job_id!r} already exists in namespace "
                f"{request.namespace!r} with a different request"
            )
        return existing

    async def _end(
        self,
        placement_id: str,
        state: EventKind,
        reason: str | None,
        namespace: str | None = None,
    ) -> Placement | None:
        ending = Ending(placement_id, state, self._clock_ms(), reason, namespace)
        placement, ended = await self._ends.end(ending)
        if ended:
            self.ledger.release(placement_id)
        return placement
