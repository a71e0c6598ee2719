"""What the placement service needs of its storage: the :class:`PlacementStore` Protocol
and the outcomes of its writes. Postgres (``adapters/store.py``) is the real one; the
in-memory twin (``adapters/memory_store.py``) keeps the same rules for unit tests.

A write is one round trip: it checks against the committed rows everything a replica's
in-memory view could have wrong (the job id, the quota, the port) and answers with an
outcome; a GPU another live placement holds raises
:class:`~fairlane_scheduler.errors.AllocationConflictError`.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from fairlane_events.records import SlowGpu
from fairlane_scheduler.core.ledger import Holding
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placements import EventKind, Placement, PlacementRequest
from fairlane_scheduler.core.quota import Quota

__all__ = [
    "Ending",
    "JobTaken",
    "NoFreePort",
    "NotPending",
    "OverQuota",
    "PlacementStore",
    "WriteOutcome",
    "Written",
]


@dataclass(frozen=True)
class Ending:
    """An open placement to end: its new state, when, why, and the namespace it must
    belong to (None: any)."""

    placement_id: str
    state: EventKind
    now_ms: int
    reason: str | None = None
    namespace: str | None = None


@dataclass(frozen=True)
class Written:
    """Committed: the placement as stored (its port may differ from the one proposed)."""

    placement: Placement


@dataclass(frozen=True)
class JobTaken:
    """The namespace already has a placement with this job id (nothing written)."""


@dataclass(frozen=True)
class OverQuota:
    """The quota refused the GPUs, judged on the committed rows (nothing written)."""

    quota: Quota
    used: Mapping[str, float]


@dataclass(frozen=True)
class NoFreePort:
    """Every MASTER_PORT of the range is live on the master node (nothing written)."""


@dataclass(frozen=True)
class NotPending:
    """The pending placement to promote was placed or ended meanwhile."""


WriteOutcome = Written | JobTaken | OverQuota | NoFreePort | NotPending


class PlacementStore(Protocol):
    async def create(
        self, placement: Placement, request: PlacementRequest, ports: PortRange
    ) -> WriteOutcome:
        """Store a new placement, placed (GPUs, port, quota, ``created`` event) or
        pending (``pending`` event): :class:`Written`, :class:`JobTaken`,
        :class:`OverQuota` or :class:`NoFreePort`."""

    async def create_many(
        self, batch: Sequence[tuple[Placement, PlacementRequest]], ports: PortRange
    ) -> list[WriteOutcome | None]:
        """:meth:`create` for each, in one transaction, outcomes in order; None: a GPU or
        port another live placement holds (that placement alone is not written)."""

    async def promote(self, placement: Placement, now_ms: int, ports: PortRange) -> WriteOutcome:
        """Give a pending placement its GPUs: :class:`Written`, :class:`NotPending`,
        :class:`OverQuota` or :class:`NoFreePort`."""

    async def end(self, ending: Ending) -> tuple[Placement | None, bool]:
        """End an open placement (its GPUs freed, its event written): the placement and
        whether it ended now (False: it had ended before). None: no such placement (in
        its namespace, when given)."""

    async def end_many(self, endings: Sequence[Ending]) -> list[tuple[Placement | None, bool]]:
        """:meth:`end` for each, in one transaction, answers in order."""

    async def get(self, placement_id: str) -> Placement | None: ...

    async def find_job(self, namespace: str, job_id: str) -> Placement | None: ...

    async def renew(
        self, placement_id: str, now_ms: int, lease_s: float | None
    ) -> Placement | None:
        """Lease to now + ``lease_s`` (default: the placed lease); None if not live or
        leaseless."""

    async def due_for_expiry(self, now_ms: int, limit: int = 100) -> list[str]: ...

    async def pending(self, limit: int = 100) -> list[tuple[Placement, PlacementRequest]]:
        """Waiting placements, highest priority first, then oldest."""

    async def page(
        self, namespace: str | None, state: str | None, limit: int, before_ms: int | None
    ) -> list[Placement]:
        """Newest first; ``before_ms`` continues after the last page's ``created_at_ms``."""

    async def live_ids(self) -> list[str]:
        """The ids of every live placement (the committed rows, any replica's)."""

    async def holdings(self, ids: Collection[str]) -> list[Holding]:
        """What the live placements among ``ids`` hold (the committed rows, any
        replica's)."""

    async def live_holding(self, gpus: Collection[str]) -> list[tuple[Placement, str | None]]:
        """The live placements that hold any of ``gpus``, each with its job class (None:
        the request named none); the committed rows, any replica's."""

    async def record_degraded(
        self, placement: Placement, slow: Sequence[SlowGpu], now_ms: int
    ) -> list[SlowGpu]:
        """Record ``slow`` GPUs of a live placement as announced and write one
        ``degraded`` event of those not announced before (by anyone), in one
        transaction; those it announced (none: all were, or the placement ended)."""

    async def quotas(self) -> dict[str, Quota]: ...

    async def quota_and_usage(self, namespace: str) -> tuple[Quota | None, dict[str, float]]: ...

    async def set_quota(self, namespace: str, quota: Quota) -> None: ...

    async def cordon(self, node: str, reason: str) -> None: ...

    async def uncordon(self, node: str) -> None: ...

    async def cordoned(self) -> dict[str, str]: ...

    async def backlog(self) -> tuple[int, int]:
        """Outbox events not yet published, and placements waiting in the queue."""

    async def ping(self) -> None: ...
