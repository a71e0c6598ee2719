"""PlacementService orchestration on the in-memory twin of the store: replays, job
conflicts, lost races, the queue and backfill, quotas, releases. No Postgres here;
the same rules against the real database are in tests/integration/."""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Callable, Sequence

import pytest

from fairlane_scheduler.adapters.memory_store import MemoryStore
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.core.quota import Quota
from fairlane_scheduler.errors import (
    AllocationConflictError,
    JobConflictError,
    NoCapacityError,
    NotReadyError,
    QuotaBusyError,
    QuotaNeverFitsError,
)
from fairlane_scheduler.service import PlacementService
from fairlane_scheduler.storage import Ending, WriteOutcome
from tests.factories import GIB, gpu_score

NOW = 1_700_000_000_000


def fleet_of(nodes: int, gpus: int) -> FleetView:
    fleet = FleetView(StabilityPolicy(threshold=0.65, window_s=120))
    for n, i in itertools.product(range(nodes), range(gpus)):
        fleet.apply(gpu_score(node=f"n{n}", uuid=f"n{n}-{i}", index=i, score=0.9, ts_ms=NOW))
    return fleet


def service_on(
    store: MemoryStore, fleet: FleetView, *, ready: bool = True, batch_max: int = 8
) -> PlacementService:
    ids = (f"00000000-0000-0000-0000-{i:012d}" for i in itertools.count(1))
    return PlacementService(
        store=store,
        fleet=fleet,
        policy=PlacementPolicy(threshold=0.65, stale_after_s=90),
        ports=PortRange(29500, 29999),
        clock_ms=lambda: NOW,
        is_fleet_ready=lambda: ready,
        new_id=lambda: next(ids),
        batch_max=batch_max,
    )


def request(job: str, gpus: int = 1, **more: object) -> PlacementRequest:
    fields: dict[str, object] = {
        "job_id": job,
        "namespace": "team",
        "gpus_per_node": gpus,
        "min_gpu_memory_gib": None,
        "models": None,
        "fingerprint": f"{job}/{gpus}/{sorted(more.items())}",
        **more,
    }
    return PlacementRequest(**fields)  # type: ignore[arg-type]


def gpus_of(placement: Placement) -> set[str]:
    return {g.uuid for n in placement.nodes for g in n.gpus}


async def test_an_identical_request_replays_and_a_different_one_conflicts() -> None:
    service = service_on(MemoryStore(), fleet_of(1, 4))
    first, created = await service.place(request("j", 2))
    assert created
    assert first.id == "00000000-0000-0000-0000-000000000001"  # ids are injected
    assert await service.place(request("j", 2)) == (first, False)
    with pytest.raises(JobConflictError):
        await service.place(request("j", 3))


async def test_a_replay_is_answered_even_when_nothing_fits_or_scores_are_missing() -> None:
    store, fleet = MemoryStore(), fleet_of(1, 2)
    service = service_on(store, fleet)
    first, _ = await service.place(request("j", 2))  # the fleet is full now
    assert await service.place(request("j", 2)) == (first, False)
    assert await service_on(store, fleet, ready=False).place(request("j", 2)) == (first, False)
    with pytest.raises(NotReadyError):
        await service_on(store, fleet, ready=False).place(request("other", 1))


async def test_concurrent_requests_of_one_replica_never_choose_the_same_gpus() -> None:
    store = MemoryStore()
    service = service_on(store, fleet_of(4, 8))
    answers = await asyncio.gather(*(service.place(request(f"j{i}", 2)) for i in range(16)))
    held = [gpus_of(p) for p, _ in answers]
    assert len(set().union(*held)) == 32  # every GPU once
    assert service.conflicts == 0
    assert store.batches == [8, 8]  # decided together, written together, 8 at most a write
    assert store.writes == 2


class GatedStore(MemoryStore):
    """Its batch writes wait for ``gate``; it notes how many GPUs the service had decided
    on (reserved or committed) when each began."""

    def __init__(self, service: Callable[[], PlacementService]) -> None:
        super().__init__()
        self.gate = asyncio.Event()
        self.decided_at_write: list[int] = []
        self._service = service

    async def create_many(
        self, batch: Sequence[tuple[Placement, PlacementRequest]], ports: PortRange
    ) -> list[WriteOutcome | None]:
        self.decided_at_write.append(len(self._service().allocated))
        await self.gate.wait()
        return await super().create_many(batch, ports)


async def test_a_full_batch_is_written_while_the_next_one_is_decided() -> None:
    store = GatedStore(lambda: service)
    service = service_on(store, fleet_of(4, 8), batch_max=4)
    placing = [asyncio.create_task(service.place(request(f"j{i}", 1))) for i in range(8)]
    await asyncio.sleep(0)  # one turn of the loop: all eight decide in it
    assert store.decided_at_write == [4, 8]  # the first write began before the fifth decided
    placing[3].cancel()  # the request that filled (and sent) the first batch gives up
    store.gate.set()
    answers = await asyncio.gather(*placing, return_exceptions=True)
    assert isinstance(answers[3], asyncio.CancelledError)
    assert all(isinstance(a, tuple) and a[1] for i, a in enumerate(answers) if i != 3)
    assert len(store.placements) == 8  # its batch was written all the same


class GatedDeadlockStore(GatedStore):
    """Its first batch write is rolled back whole once it has waited for the gate: the
    error reaches a write started eagerly after it suspended."""

    async def create_many(
        self, batch: Sequence[tuple[Placement, PlacementRequest]], ports: PortRange
    ) -> list[WriteOutcome | None]:
        if not self.decided_at_write:
            self.decided_at_write.append(len(self._service().allocated))
            await self.gate.wait()
            raise AllocationConflictError("deadlock detected: rolled back, to be retried")
        return await super().create_many(batch, ports)


async def test_a_full_batch_rolled_back_after_it_was_sent_retries_its_requests() -> None:
    store = GatedDeadlockStore(lambda: service)
    service = service_on(store, fleet_of(4, 8), batch_max=4)
    placing = [asyncio.create_task(service.place(request(f"j{i}", 1))) for i in range(8)]
    await asyncio.sleep(0)
    store.gate.set()
    answers = await asyncio.gather(*placing)
    assert all(created for _, created in answers)
    assert len(set().union(*(gpus_of(p) for p, _ in answers))) == 8
    assert service.conflicts == 4  # the rolled-back batch's four, each retried
    assert len(store.placements) == 8


async def test_a_lost_race_in_a_batch_retries_that_request_alone() -> None:
    store = MemoryStore()
    ours, theirs = service_on(store, fleet_of(3, 2)), service_on(store, fleet_of(3, 2))
    await ours.resync()
    taken, _ = await theirs.place(request("theirs", 2))  # n0, which ours thinks free
    answers = await asyncio.gather(ours.place(request("a", 2)), ours.place(request("b", 2)))
    assert all(created for _, created in answers)
    held = [gpus_of(taken), *(gpus_of(p) for p, _ in answers)]
    assert len(set().union(*held)) == 6  # no GPU twice
    assert ours.conflicts == 1
    assert store.batches == [2]  # a lost n0, b committed; a's retry went alone
    assert store.writes == 3  # theirs, the batch, a's retry


async def test_identical_requests_in_one_batch_are_one_placement() -> None:
    store = MemoryStore()
    service = service_on(store, fleet_of(1, 4))
    answers = await asyncio.gather(*(service.place(request("j", 2)) for _ in range(2)))
    assert sorted(created for _, created in answers) == [False, True]
    assert answers[0][0] == answers[1][0]
    assert len(service.allocated) == 2  # the replayed request's reservation is gone


async def test_a_stale_view_loses_the_race_resynchronises_and_retries() -> None:
    store = MemoryStore()  # one database, a fleet view per replica
    ours, theirs = service_on(store, fleet_of(1, 4)), service_on(store, fleet_of(1, 4))
    await ours.resync()
    taken, _ = await theirs.place(request("theirs", 2))  # a replica ours has not heard of
    placed, created = await ours.place(request("ours", 2))
    assert created
    assert gpus_of(placed).isdisjoint(gpus_of(taken))
    assert ours.conflicts == 1
    assert store.writes == 3  # theirs, our lost attempt, our retry


async def test_a_port_taken_by_another_replica_is_replaced_by_a_free_one() -> None:
    def fleet() -> FleetView:
        view = fleet_of(1, 1)
        view.apply(gpu_score(node="n0", uuid="big", index=1, mem_total_bytes=141 * GIB, ts_ms=NOW))
        return view

    store = MemoryStore()
    ours, theirs = service_on(store, fleet()), service_on(store, fleet())
    their_first, _ = await theirs.place(request("t1", 1, min_gpu_memory_gib=100))
    ours_first, _ = await ours.place(request("o1", 1))  # ours saw nothing: proposes 29500
    assert gpus_of(ours_first) == {"n0-0"}
    assert their_first.nodes[0].master_port == 29500
    assert ours_first.nodes[0].master_port == 29501
    assert ours.ledger.ports("n0") == {29501}  # the port the store gave, not the proposal


async def test_quota_refuses_busy_now_or_never() -> None:
    store = MemoryStore()
    service = service_on(store, fleet_of(1, 8))
    await service.set_quota("team", Quota(max_gpus=3))
    await service.place(request("a", 2))
    with pytest.raises(QuotaBusyError):
        await service.place(request("b", 2))
    with pytest.raises(QuotaNeverFitsError):
        await service.place(request("c", 4))
    assert (await service.quota("team"))[1] == {"H100": 2}


async def test_the_committed_rows_refuse_a_quota_a_stale_view_would_allow() -> None:
    store = MemoryStore()
    ours, theirs = service_on(store, fleet_of(1, 8)), service_on(store, fleet_of(1, 8))
    await ours.set_quota("team", Quota(max_gpus=3))
    await theirs.resync()
    await theirs.place(request("theirs", 2))  # ours does not know
    with pytest.raises(QuotaBusyError):
        await ours.place(request("ours", 2))
    queued, created = await ours.place(request("queued", 2, queue=True))
    assert (queued.state, created) == ("pending", True)


async def test_the_queue_places_by_priority_and_backfills_what_fits() -> None:
    store = MemoryStore()
    service = service_on(store, fleet_of(1, 4))
    holder, _ = await service.place(request("holder", 4))
    big, _ = await service.place(request("big", 4, queue=True, priority=5))
    small, _ = await service.place(request("small", 1, queue=True))
    assert (big.state, small.state) == ("pending", "pending")
    assert await service.place_pending() == []
    await service.release(holder.id)
    other, _ = await service.place(request("other", 1))  # 3 GPUs free: big still waits
    placed = await service.place_pending()
    assert [p.job_id for p in placed] == ["small"]  # backfilled past big
    await service.release(other.id)
    await service.release(placed[0].id)
    assert [p.job_id for p in await service.place_pending()] == ["big"]
    kinds = [(e.job_id, e.event) for e in store.events if e.job_id == "big"]
    assert kinds == [("big", "pending"), ("big", "created")]


async def test_release_frees_the_gpus_once_and_returns_the_ended_placement() -> None:
    store = MemoryStore()
    service = service_on(store, fleet_of(1, 2))
    first, _ = await service.place(request("a", 2))
    with pytest.raises(NoCapacityError):
        await service.place(request("b", 1))
    released = await service.release(first.id)
    assert released.state == "released"
    assert await service.release(first.id) == released  # idempotent
    assert list(service.allocated) == []
    assert (await service.place(request("b", 1)))[1]
    assert [e.event for e in store.events if e.job_id == "a"] == ["created", "released"]


async def test_releases_of_one_loop_turn_are_ended_by_one_write() -> None:
    service = service_on(MemoryStore(), fleet_of(2, 4))
    placed = [(await service.place(request(f"j{i}", 2)))[0] for i in range(4)]
    ids = [p.id for p in placed]
    released = await asyncio.gather(*(service.release(i) for i in [*ids, ids[0]]))
    assert [(p.id, p.state) for p in released] == [(i, "released") for i in [*ids, ids[0]]]
    assert service.group_ends == (1, 5)
    assert not service.allocated
    assert (await service.place(request("k", 4)))[0].state == "placed"  # the GPUs are free


class DeadlockingStore(MemoryStore):
    """Its first batch write of each kind is rolled back whole, as Postgres does to one
    side of a deadlock between two replicas' batches (the Postgres store raises it)."""

    def __init__(self) -> None:
        super().__init__()
        self.rolled_back: list[str] = []

    def _roll_back_first(self, kind: str) -> None:
        if kind not in self.rolled_back:
            self.rolled_back.append(kind)
            raise AllocationConflictError("deadlock detected: rolled back, to be retried")

    async def create_many(
        self, batch: Sequence[tuple[Placement, PlacementRequest]], ports: PortRange
    ) -> list[WriteOutcome | None]:
        self._roll_back_first("create")
        return await super().create_many(batch, ports)

    async def end_many(self, endings: Sequence[Ending]) -> list[tuple[Placement | None, bool]]:
        self._roll_back_first("end")
        return await super().end_many(endings)


async def test_batches_rolled_back_by_a_deadlock_are_written_again() -> None:
    store = DeadlockingStore()
    service = service_on(store, fleet_of(2, 4))
    placed = await asyncio.gather(*(service.place(request(f"j{i}", 2)) for i in range(4)))
    assert all(created for _, created in placed)
    assert len(set().union(*(gpus_of(p) for p, _ in placed))) == 8
    released = await asyncio.gather(*(service.release(p.id) for p, _ in placed))
    assert {p.state for p in released} == {"released"}
    assert store.rolled_back == ["create", "end"]
    assert not service.allocated
