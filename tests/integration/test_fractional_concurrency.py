"""Fractional GPUs under three replicas (issue 29): three placement services, each with
its own Postgres pool, fleet view and ledger, on one database, take a seeded storm of
thousands of fractional and whole requests with releases interleaved. Their views go
stale (a replica learns another's placements only when it loses a race), so they keep
proposing GPUs the others filled: the database's per-GPU ledger (migration 0015) must
refuse every over-commit. Afterwards the live allocations, read from the database, never
pass a whole GPU's share or a GPU's memory, and no whole GPU has a fractional tenant."""

from __future__ import annotations

import asyncio
import itertools
import random
from collections import Counter
from contextlib import AsyncExitStack

import asyncpg
import pytest

from fairlane_scheduler.adapters.migrations import apply_migrations, load_migrations
from fairlane_scheduler.adapters.pg_pool import connect_pool
from fairlane_scheduler.adapters.store import PostgresStore
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placement import PlacementPolicy
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.errors import (
    AllocationConflictError,
    NoCapacityError,
    QuotaExceededError,
)
from fairlane_scheduler.service import PlacementService
from fairlane_scheduler.storage import WriteOutcome
from tests.factories import gpu_score

pytestmark = pytest.mark.integration

REPLICAS, WORKERS, ROUNDS = 3, 60, 40  # 2,400 requests
NODES, GPUS_PER_NODE = 4, 4  # few GPUs: the replicas collide often
GPU_MEMORY_MIB = 80 * 1024
NOW = 1_700_000_000_000
SHARES = (0.1, 0.2, 0.25, 0.3, 0.5, 0.75, 1.0)


def _fleet() -> FleetView:
    fleet = FleetView()
    for n, i in itertools.product(range(NODES), range(GPUS_PER_NODE)):
        uuid = f"GPU-frac-{n}-{i}"
        fleet.apply(gpu_score(node=f"frac-{n}", uuid=uuid, index=i, ts_ms=NOW))
    return fleet


def _request(rng: random.Random, job_id: str) -> PlacementRequest:
    """Two in three fractional (some with their own memory), else one or two whole GPUs."""
    fractional = rng.random() < 2 / 3
    share = rng.choice(SHARES) if fractional else None
    memory = rng.choice([None, None, 4096, 30 * 1024]) if fractional else None
    return PlacementRequest(
        job_id=job_id,
        namespace="storm",
        gpus_per_node=1 if fractional else rng.choice([1, 1, 2]),
        min_gpu_memory_gib=None,
        models=None,
        fingerprint=job_id,
        gpu_share=share,
        gpu_memory_mib=memory,
    )


class _CountingStore(PostgresStore):
    """The Postgres store, counting the fractional writes the database refused."""

    refused = 0

    async def create(
        self, placement: Placement, request: PlacementRequest, ports: PortRange
    ) -> WriteOutcome:
        try:
            return await super().create(placement, request, ports)
        except AllocationConflictError as exc:
            if "live shares would pass" in str(exc):
                _CountingStore.refused += 1
            raise


async def test_three_replicas_never_overcommit_a_gpu(database_url: str) -> None:
    async with AsyncExitStack() as stack:
        services = []
        for _ in range(REPLICAS):
            pool = await connect_pool(database_url)
            stack.push_async_callback(pool.close)
            async with pool.acquire() as conn:
                await apply_migrations(conn, load_migrations())
            services.append(
                PlacementService(
                    store=_CountingStore(pool),
                    fleet=_fleet(),
                    policy=PlacementPolicy(threshold=0.65, stale_after_s=10**9),
                    ports=PortRange(29500, 29999),
                    clock_ms=lambda: NOW,
                    is_fleet_ready=lambda: True,
                )
            )
        outcomes: Counter[str] = Counter()
        running = True

        async def worker(w: int) -> None:
            rng = random.Random(w)
            held: list[Placement] = []
            for r in range(ROUNDS):
                try:
                    placement, _ = await rng.choice(services).place(_request(rng, f"w{w}-{r}"))
                except (NoCapacityError, QuotaExceededError) as exc:
                    outcomes[type(exc).__name__] += 1
                else:
                    outcomes["shares" if placement.shared_gpu_memory_mib else "whole"] += 1
                    held.append(placement)
                # Releases interleaved with placements, by any replica.
                while held and (len(held) > 1 or rng.random() < 0.5):
                    ending = held.pop(rng.randrange(len(held)))
                    await rng.choice(services).release(ending.id)
            for ending in held:
                await rng.choice(services).release(ending.id)

        async def watch(conn: asyncpg.Connection) -> int:
            """Reads the live allocations over and over while the storm runs."""
            snapshots = 0
            while running:
                await _assert_within_each_gpu(conn)
                snapshots += 1
            return snapshots

        conn = await asyncpg.connect(database_url)
        stack.push_async_callback(conn.close)
        watcher = asyncio.create_task(watch(conn))
        await asyncio.gather(*(worker(w) for w in range(WORKERS)))
        running = False
        assert await watcher > 10
        await _assert_within_each_gpu(conn)
        ledger = await conn.fetch("SELECT share_milli, memory_mib FROM gpu_shares")
        assert ledger, "the ledger kept no GPU"
        assert all(tuple(r) == (0, 0) for r in ledger), ledger  # all released

    assert outcomes["shares"] > 300, outcomes
    assert outcomes["whole"] > 50, outcomes
    # Stale views proposed GPUs another replica had filled; the ledger refused them.
    assert _CountingStore.refused > 10, (_CountingStore.refused, outcomes)


async def _assert_within_each_gpu(conn: asyncpg.Connection) -> None:
    """One snapshot of the live allocations: per GPU, shares within 1000, memory within
    the GPU's, a whole placement alone, and the ledger's sums equal to the rows'."""
    rows = await conn.fetch(
        """SELECT a.gpu_uuid, sum(a.share_milli) AS milli,
                  coalesce(sum(a.memory_mib), 0) AS memory_mib, count(*) AS tenants,
                  bool_and(a.gpu_memory_mib IS NOT NULL) AS all_shares,
                  min(s.share_milli) AS ledger_milli, min(s.memory_mib) AS ledger_memory
           FROM allocations a JOIN gpu_shares s USING (gpu_uuid)
           WHERE a.live GROUP BY a.gpu_uuid"""
    )
    for row in rows:
        assert row["milli"] <= 1000, dict(row)
        assert row["memory_mib"] <= GPU_MEMORY_MIB, dict(row)
        assert row["tenants"] == 1 or row["all_shares"], dict(row)
        assert (row["ledger_milli"], row["ledger_memory"]) == (row["milli"], row["memory_mib"])


async def test_a_share_round_trips_through_postgres(database_url: str) -> None:
    """A share is written with its row's share and memory, a new replica's snapshot
    reads it back, quotas count it as its part of a GPU, and a queued share is promoted
    with its share once another's release makes room."""
    pool = await connect_pool(database_url)
    try:
        async with pool.acquire() as conn:
            await apply_migrations(conn, load_migrations())
        store = PostgresStore(pool)
        one_gpu = FleetView()
        one_gpu.apply(gpu_score(node="frac-0", uuid="GPU-one", index=0, ts_ms=NOW))

        def replica() -> PlacementService:
            return PlacementService(
                store=store,
                fleet=one_gpu,
                policy=PlacementPolicy(threshold=0.65, stale_after_s=10**9),
                ports=PortRange(29500, 29999),
                clock_ms=lambda: NOW,
                is_fleet_ready=lambda: True,
            )

        first = replica()
        ask = PlacementRequest("a", "team", 1, None, None, "a", gpu_share=0.75)
        held, _ = await first.place(ask)
        late = replica()  # a replica started now learns the share from the database
        await late.resync()
        assert late.ledger.shares("GPU-one") == (750, 60 * 1024, 1)
        assert (await store.quota_and_usage("team"))[1] == {"H100": 0.75}
        queued = PlacementRequest("b", "team", 1, None, None, "b", queue=True, gpu_share=0.5)
        waiting, _ = await late.place(queued)
        assert waiting.state == "pending"
        await first.release(held.id)
        await late.resync()  # as the allocation cache does every second
        (promoted,) = await late.place_pending()
        slot = promoted.nodes[0].gpus[0]
        assert (slot.uuid, slot.share, slot.memory_mib) == ("GPU-one", 0.5, 40 * 1024)
        rows = await pool.fetch("SELECT share_milli, memory_mib FROM gpu_shares")
        assert [tuple(r) for r in rows] == [(500, 40 * 1024)]
    finally:
        await pool.close()
