import asyncio
import uuid
from collections.abc import AsyncIterator
from dataclasses import replace
from datetime import UTC, datetime

import asyncpg
import pytest
from aiokafka.partitioner import DefaultPartitioner

from fairlane_events.codec import decode
from fairlane_events.records import GpuSlot, NodeAssignment, PlacementEvent
from fairlane_events.topics import STREAM_PARTITIONS
from fairlane_scheduler.adapters.migrations import (
    Migration,
    MigrationError,
    apply_migrations,
    load_migrations,
)
from fairlane_scheduler.adapters.outbox import OutboxRelay
from fairlane_scheduler.adapters.pg_pool import connect_pool, keeps_session_state
from fairlane_scheduler.adapters.store import _PLACE_MANY, PostgresStore, _place_columns
from fairlane_scheduler.api.deps import SchedulerMetrics
from fairlane_scheduler.core.ledger import Holding
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placements import Placement, PlacementRequest
from fairlane_scheduler.errors import AllocationConflictError, DatabaseUnavailableError
from fairlane_scheduler.storage import Ending, JobTaken, Written
from tests.integration.test_scheduler_api import placement_events, placement_records

pytestmark = pytest.mark.integration


@pytest.fixture
async def pool(database_url: str) -> AsyncIterator[asyncpg.Pool]:
    pool = await connect_pool(database_url)
    async with pool.acquire() as conn:
        await apply_migrations(conn, load_migrations())
    yield pool
    await pool.close()


def placement(
    pid: str, job: str, gpus: list[str], port: int = 29500, node: str = "n1"
) -> Placement:
    return Placement(
        id=pid,
        job_id=job,
        namespace="default",
        state="placed",
        created_at_ms=1,
        nodes=(
            NodeAssignment(
                node=node,
                node_rank=0,
                gpus=[GpuSlot(uuid=g, index=i) for i, g in enumerate(gpus)],
                cuda_visible_devices=",".join(str(i) for i in range(len(gpus))),
                master_addr=node,
                master_port=port,
                world_size=len(gpus),
            ),
        ),
        fingerprint="f",
        gpu_scores=dict.fromkeys(gpus, 0.9),
        gpu_models=dict.fromkeys(gpus, "H100"),
    )


REQUEST = PlacementRequest(
    job_id="job",
    namespace="default",
    gpus_per_node=1,
    min_gpu_memory_gib=None,
    models=None,
    fingerprint="f",
)
P1 = "00000000-0000-0000-0000-000000000001"
P2 = "00000000-0000-0000-0000-000000000002"
P3 = "00000000-0000-0000-0000-000000000003"


def outbox_relay(
    pool: asyncpg.Pool, kafka_bootstrap: str, *, poll_s: float, batch: int = 500
) -> OutboxRelay:
    metrics = SchedulerMetrics.create()
    return OutboxRelay(
        pool,
        kafka_bootstrap,
        postgres_outage=metrics.outage("outbox relay", "postgres"),
        kafka_outage=metrics.outage("outbox relay", "kafka"),
        poll_s=poll_s,
        batch=batch,
    )


async def test_the_pool_resets_only_sessions_marked_as_keeping_state(database_url: str) -> None:
    """No reset statement on release (it doubled each placement's round trips), except
    for a session marked as holding state: its advisory lock does not outlive it."""
    pool = await connect_pool(database_url, min_size=1, max_size=1)
    held = "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND pid = pg_backend_pid()"
    try:
        async with pool.acquire() as conn:
            await conn.execute("SET application_name = 'unreset'")
        async with pool.acquire() as conn:  # the same session, not reset
            assert await conn.fetchval("SHOW application_name") == "unreset"
            keeps_session_state(conn)
            await conn.execute("SELECT pg_advisory_lock(42)")
        async with pool.acquire() as conn:
            assert await conn.fetchval(held) == 0
            assert await conn.fetchval("SHOW application_name") != "unreset"
    finally:
        await pool.close()


async def test_migrations_apply_once_and_detect_edits(database_url: str) -> None:
    conn = await asyncpg.connect(database_url)
    try:
        migrations = load_migrations()
        assert await apply_migrations(conn, migrations) == [m.name for m in migrations]
        assert await apply_migrations(conn, migrations) == []
        edited = [Migration(m.version, m.name, m.sql + "\n-- edited") for m in migrations]
        with pytest.raises(MigrationError, match="changed after it was applied"):
            await apply_migrations(conn, edited)
    finally:
        await conn.close()


async def test_replicas_starting_together_on_a_fresh_database_migrate_once(
    database_url: str,
) -> None:
    # Seen in the placement bench: three replicas starting at once, one failed on
    # "duplicate key value violates unique constraint pg_type_typname_nsp_index".
    migrations = load_migrations()
    conns = [await asyncpg.connect(database_url) for _ in range(6)]
    try:
        applied = await asyncio.gather(*(apply_migrations(c, migrations) for c in conns))
        assert sorted(map(len, applied)) == [0] * 5 + [len(migrations)]
    finally:
        for conn in conns:
            await conn.close()


async def test_a_transaction_postgres_rolls_back_is_a_conflict_to_retry(
    pool: asyncpg.Pool,
) -> None:
    # One side of a deadlock between two replicas' batches (seen in the placement bench
    # with 3 replicas: a 500), or a serialization failure.
    store = PostgresStore(pool)
    for code in ("40P01", "40001"):
        with pytest.raises(AllocationConflictError, match="rolled back, to be retried"):
            await store._fetch(
                f"DO $$ BEGIN RAISE EXCEPTION 'lost' USING ERRCODE = '{code}'; END $$"
            )


PORTS = PortRange(29500, 29999)


async def live_gpus(store: PostgresStore) -> set[str]:
    return {g for h in await store.holdings(await store.live_ids()) for g in h.gpus}


async def test_placement_round_trips(pool: asyncpg.Pool) -> None:
    store = PostgresStore(pool)
    stored = placement(P1, "job-1", ["g1", "g2"])
    assert await store.create(stored, REQUEST, PORTS) == Written(stored)
    got = await store.get(P1)
    assert got is not None
    assert (got.id, got.job_id, got.nodes, got.fingerprint) == (P1, "job-1", stored.nodes, "f")
    assert await store.find_job("default", "job-1") == got
    assert await store.holdings([P1]) == [
        Holding(P1, "default", "n1", 29500, ("g1", "g2"), ("H100", "H100"))
    ]
    # A snapshot reads the live ids, then the holdings of those it asks for.
    await store.create(placement(P2, "job-2", ["g3"], port=29501), REQUEST, PORTS)
    assert sorted(await store.live_ids()) == [P1, P2]
    assert [h.placement_id for h in await store.holdings([P2])] == [P2]
    assert await store.holdings([]) == []
    await store.end(Ending(P2, "released", 1_700_000_000_000, None, None))
    assert await store.live_ids() == [P1]
    assert await store.holdings([P2]) == []
    # The same job id again writes nothing, whatever its GPUs.
    again = placement(P3, "job-1", ["g4"], port=29502)
    assert await store.create(again, REQUEST, PORTS) == JobTaken()
    assert await store.get(P3) is None


async def test_database_forbids_two_live_allocations_of_one_gpu(pool: asyncpg.Pool) -> None:
    store = PostgresStore(pool)
    await store.create(placement(P1, "job-1", ["g1", "g2"]), REQUEST, PORTS)
    with pytest.raises(AllocationConflictError):
        await store.create(placement(P2, "job-2", ["g2", "g3"], port=29501), REQUEST, PORTS)
    # The statement rolled back as a whole: nothing of job-2 remains.
    assert await store.get(P2) is None
    assert await live_gpus(store) == {"g1", "g2"}
    # Once released, the GPU can be placed again.
    ended, now = await store.end(Ending(P1, "released", now_ms=2))
    assert ended is not None
    assert ended.state == "released"
    assert now
    assert await store.end(Ending(P1, "released", now_ms=3)) == (ended, False)
    assert isinstance(await store.create(placement(P2, "job-2", ["g2"]), REQUEST, PORTS), Written)


# A batch is written set-based unless a proposed port is taken (or a quota applies, or
# a job id is there twice): then placement by placement (0011). Either way, a GPU held
# elsewhere sends the batch to the subtransaction-per-placement path (0008).
PLAIN_OR_NOT = pytest.mark.parametrize(
    ("proposed", "kept"), [(29503, 29503), (29500, 29501)], ids=["set-based", "one-by-one"]
)


@PLAIN_OR_NOT
async def test_a_batch_commits_together_and_judges_each_placement_alone(
    pool: asyncpg.Pool, proposed: int, kept: int
) -> None:
    """Group commit: one statement for several placements; a GPU another live placement
    holds rolls back that placement alone, a taken job id is answered as such, a taken
    port is replaced, and what commits is exact (its scores and lease included)."""
    store = PostgresStore(pool)
    await store.create(placement(P1, "job-1", ["g1"]), REQUEST, PORTS)
    p3, p4 = (f"00000000-0000-0000-0000-00000000000{i}" for i in (3, 4))
    ok = replace(placement(P2, "job-2", ["g2"], proposed), lease_expires_at_ms=1_700_000_000_123)
    batch = [
        (ok, REQUEST),
        (placement(p3, "job-3", ["g1", "g3"], port=29501), REQUEST),  # g1 is live: lost
        (placement(p4, "job-1", ["g4"], port=29502), REQUEST),  # job-1 exists
    ]
    outcomes = await store.create_many(batch, PORTS)
    assert outcomes[1:] == [None, JobTaken()]
    assert isinstance(outcomes[0], Written)
    assert outcomes[0].placement.nodes[0].master_port == kept  # 29500 is job-1's
    assert await store.get(p3) is None
    assert await store.get(p4) is None
    got = await store.get(P2)
    assert got is not None
    assert got.lease_expires_at_ms == 1_700_000_000_123
    assert await live_gpus(store) == {"g1", "g2"}
    async with pool.acquire() as conn:
        score = await conn.fetchval("SELECT score FROM allocations WHERE gpu_uuid = 'g2'")
        events = await conn.fetchval("SELECT count(*) FROM outbox")
    assert score == 0.9
    assert events == 2  # job-1's and job-2's created events, nothing of the others


@PLAIN_OR_NOT
async def test_a_batch_without_a_conflict_writes_each_placement_its_own_rows(
    pool: asyncpg.Pool, proposed: int, kept: int
) -> None:
    """A batch in one subtransaction (0011): placements of 2, 0 (pending) and 1 GPUs,
    their allocations flattened into one array per column, each placement's rows and
    event its own; a taken job id answered as alone."""
    store = PostgresStore(pool)
    await store.create(placement(P1, "job-1", ["g1"]), REQUEST, PORTS)
    p3, p4, p5 = (f"00000000-0000-0000-0000-00000000000{i}" for i in (3, 4, 5))
    pending = replace(placement(p3, "job-3", ["g9"]), state="pending", nodes=(), gpu_scores={})
    batch = [
        (placement(P2, "job-2", ["g2", "g3"], port=proposed), REQUEST),
        (pending, REQUEST),
        (placement(p4, "job-4", ["g4"], port=29507), REQUEST),
        (placement(p5, "job-1", ["g5"], port=29508), REQUEST),  # job-1 exists
    ]
    outcomes = await store.create_many(batch, PORTS)
    assert [type(o).__name__ for o in outcomes] == ["Written", "Written", "Written", "JobTaken"]
    ports = [
        o.placement.nodes[0].master_port
        for o in outcomes
        if isinstance(o, Written) and o.placement.nodes
    ]
    assert ports == [kept, 29507]
    async with pool.acquire() as conn:
        held = await conn.fetch(
            "SELECT placement_id::text AS p, gpu_uuid, gpu_index FROM allocations ORDER BY gpu_uuid"
        )
        events = await conn.fetch(
            "SELECT placement_id::text AS p, payload->>'event' AS e,"
            " payload->'nodes'->0->>'master_port' AS port FROM outbox ORDER BY p, id"
        )
    assert [(r["p"], r["gpu_uuid"], r["gpu_index"]) for r in held] == [
        (P1, "g1", 0),
        (P2, "g2", 0),
        (P2, "g3", 1),
        (p4, "g4", 0),
    ]
    assert [(r["p"], r["e"], r["port"]) for r in events] == [
        (P1, "created", "29500"),
        (P2, "created", str(kept)),
        (p3, "pending", None),
        (p4, "created", "29507"),
    ]
    got = await store.get(p3)
    assert got is not None
    assert got.state == "pending"
    assert await store.get(p5) is None


async def test_two_replicas_batches_in_opposite_node_orders_do_not_deadlock(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """Replica A's batch has written n1's placement and goes on to n2's; replica B's
    batch lists n2's placement before n1's. Taken in the batch's order, B would hold n2
    while waiting for n1, and A's n2 would close a cycle that Postgres breaks only after
    deadlock_timeout, failing one side (0012: rows are taken in node order)."""
    store = PostgresStore(pool)
    a1, a2, b1, b2 = (f"00000000-0000-0000-0000-0000000000a{i}" for i in range(4))
    replica_a = await asyncpg.connect(database_url)
    try:
        async with replica_a.transaction():
            await replica_a.fetch(
                _PLACE_MANY, *_place_columns([(placement(a1, "a1", ["n1-g0"]), REQUEST)], PORTS)
            )
            replica_b = asyncio.create_task(
                store.create_many(
                    [
                        (placement(b2, "b2", ["n2-g0"], node="n2"), REQUEST),
                        (placement(b1, "b1", ["n1-g0"]), REQUEST),
                    ],
                    PORTS,
                )
            )
            await _until_waiting_for_locks(replica_a, 1)
            a_on_n2 = [(placement(a2, "a2", ["n2-g0"], node="n2"), REQUEST)]
            await replica_a.fetch(_PLACE_MANY, *_place_columns(a_on_n2, PORTS))
        assert await replica_b == [None, None]  # both GPUs lost to A, no deadlock
    finally:
        await replica_a.close()
    assert await live_gpus(store) == {"n1-g0", "n2-g0"}


async def test_a_single_placement_takes_its_gpus_in_the_order_batches_do(
    pool: asyncpg.Pool, database_url: str
) -> None:
    """A batch written set-based takes its GPUs by node and GPU id (0012); a single
    placement took them in its own order (by GPU index). Here the batch holds n1-a and
    waits for n1-m (another transaction's), while the single one, whose index order is
    n1-z then n1-a, held n1-z and waited for n1-a: once n1-m is free the batch waits
    for n1-z, a cycle that Postgres broke after deadlock_timeout. In one order, the
    single placement waits for n1-a holding no GPU, and simply loses it."""
    store = PostgresStore(pool)
    holder = await asyncpg.connect(database_url)
    try:
        in_the_way = holder.transaction()
        await in_the_way.start()
        holding = [(placement(P3, "x", ["n1-m"], port=29502), REQUEST)]
        await holder.fetch(_PLACE_MANY, *_place_columns(holding, PORTS))
        batch = asyncio.create_task(
            store.create_many(
                [(placement(P1, "s", ["n1-a", "n1-m", "n1-z"], port=29501), REQUEST)], PORTS
            )
        )
        await _until_waiting_for_locks(holder, 1)
        single = asyncio.create_task(
            store.create(placement(P2, "p", ["n1-z", "n1-a"]), REQUEST, PORTS)
        )
        await _until_waiting_for_locks(holder, 2)
        await in_the_way.rollback()  # n1-m is free
    finally:
        await holder.close()
    (written,) = await batch
    assert isinstance(written, Written)
    with pytest.raises(AllocationConflictError) as lost:
        await single
    assert "deadlock" not in str(lost.value)  # lost its race, not a cycle
    assert await live_gpus(store) == {"n1-a", "n1-m", "n1-z"}


async def _until_waiting_for_locks(conn: asyncpg.Connection, sessions: int) -> None:
    for _ in range(200):
        # Inside a transaction the statistics read first would be read again (PG 15).
        await conn.execute("SELECT pg_stat_clear_snapshot()")
        waiting = await conn.fetchval(
            "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock'"
            " AND state = 'active' AND datname = current_database()"
        )
        if waiting >= sessions:
            return
        await asyncio.sleep(0.02)
    raise AssertionError(f"fewer than {sessions} statements ever waited for a lock")


async def test_a_batch_of_endings_answers_each_as_one_ending_would(pool: asyncpg.Pool) -> None:
    """Releases and expiries of one loop turn are ended by one statement: each answered
    in order as fairlane_end answers it, the same id twice ended once."""
    store = PostgresStore(pool)
    await store.create(placement(P1, "job-1", ["g1"]), REQUEST, PORTS)
    await store.create(placement(P2, "job-2", ["g2"], port=29501), REQUEST, PORTS)
    missing = "00000000-0000-0000-0000-0000000000ff"
    endings = [
        Ending(P2, "released", 1_700_000_000_500, None, "default"),
        Ending(P1, "expired", 1_700_000_000_600, "lease not renewed", "other"),  # not its
        Ending(P1, "released", 1_700_000_000_700, None, None),
        Ending(missing, "released", 1_700_000_000_800, None, None),
        Ending(P2, "released", 1_700_000_000_900, None, None),  # ended above
    ]
    answers = await store.end_many(endings)
    assert [(p and (p.id, p.state, p.ended_at_ms), ended) for p, ended in answers] == [
        ((P2, "released", 1_700_000_000_500), True),
        (None, False),
        ((P1, "released", 1_700_000_000_700), True),
        (None, False),
        ((P2, "released", 1_700_000_000_500), False),
    ]
    assert await live_gpus(store) == set()
    async with pool.acquire() as conn:
        events = await conn.fetch("SELECT payload->>'event' AS e FROM outbox ORDER BY id")
    assert [r["e"] for r in events] == ["created", "created", "released", "released"]


async def test_batches_read_their_rows_by_index_however_the_tables_grew(
    pool: asyncpg.Pool,
) -> None:
    """A batch of placements and one of releases read a few rows by index, also in a
    session that first wrote on a new database's empty tables: the plans PL/pgSQL kept
    from then scanned every placement ever made for each batch of releases (migration
    0013 plans fairlane_end_many at each call)."""
    end_many = "SELECT * FROM fairlane_end_many($1::uuid[], $2, $3, $4, $5, $6)"

    async def place_and_end(conn: asyncpg.Connection, tag: str) -> None:
        ids = [str(uuid.uuid4()) for _ in range(2)]
        batch = [
            (placement(pid, f"{tag}-{k}", [f"{tag}-g{k}"], node=f"{tag}-n{k}"), REQUEST)
            for k, pid in enumerate(ids)
        ]
        (row,) = await conn.fetch(_PLACE_MANY, *_place_columns(batch, PORTS))
        assert list(row["outcomes"]) == ["created", "created"]
        ended = await conn.fetch(
            end_many, ids, ["released"] * 2, [datetime.now(UTC)] * 2, [1, 1], [None] * 2, [None] * 2
        )
        assert [r["ended"] for r in ended] == [True, True]

    async with pool.acquire() as conn:
        for n in range(8):  # past the five calls after which a session may keep a generic plan
            await place_and_end(conn, f"warm{n}")
        await conn.execute(
            """INSERT INTO placements (id, namespace, job_id, request, request_sha256, state,
                                       assignment, master_node, master_port)
               SELECT gen_random_uuid(), 'grown', 'job-' || i, '{}', 'f',
                      CASE WHEN i % 4 = 0 THEN 'placed' ELSE 'released' END, '[]',
                      'grown-' || (i / 4), CASE WHEN i % 4 = 0 THEN 29500 END
                 FROM generate_series(1, 20000) AS i"""
        )
        # The session's counts not yet reported include the warm-up's: what one batch
        # adds, in a transaction (nothing is reported during one).
        reads = """SELECT seq_scan, seq_tup_read + idx_tup_fetch AS rows,
                          pg_stat_get_xact_tuples_returned(
                              'placements_one_live_port_per_node'::regclass) AS live_ports
                     FROM pg_stat_xact_user_tables WHERE relname = 'placements'"""
        async with conn.transaction():
            before = await conn.fetchrow(reads)
            await place_and_end(conn, "after")
            after = await conn.fetchrow(reads)
    assert after["seq_scan"] - before["seq_scan"] == 0
    assert after["rows"] - before["rows"] < 100
    assert after["live_ports"] - before["live_ports"] < 100  # of 5,000 live placements


async def test_a_live_port_is_never_given_twice_on_a_node(pool: asyncpg.Pool) -> None:
    """A replica that proposes a port another live placement holds gets the lowest free
    one instead; and the unique index refuses a second live placement of one port."""
    store = PostgresStore(pool)
    await store.create(placement(P1, "job-1", ["g1"]), REQUEST, PORTS)
    outcome = await store.create(placement(P2, "job-2", ["g2"], port=29500), REQUEST, PORTS)
    assert isinstance(outcome, Written)
    assert {n.master_port for n in outcome.placement.nodes} == {29501}
    got = await store.get(P2)
    assert got is not None
    assert got.nodes == outcome.placement.nodes
    with pytest.raises(asyncpg.UniqueViolationError):
        await pool.execute("UPDATE placements SET master_port = 29500 WHERE id = $1", P2)


async def test_a_free_proposed_port_is_kept_even_above_the_lowest(pool: asyncpg.Pool) -> None:
    store = PostgresStore(pool)
    first = await store.create(placement(P1, "job-1", ["g1"], port=29700), REQUEST, PORTS)
    assert isinstance(first, Written)
    assert first.placement.nodes[0].master_port == 29700  # 29500 is free, but not proposed
    second = await store.create(placement(P2, "job-2", ["g2"], port=29700), REQUEST, PORTS)
    assert isinstance(second, Written)
    assert second.placement.nodes[0].master_port == 29500  # taken: the lowest free one


async def test_unreachable_postgres_gives_a_clear_error() -> None:
    with pytest.raises(DatabaseUnavailableError, match=r"not reachable.*postgres.sh up"):
        await connect_pool("postgresql://postgres@127.0.0.1:1/x")


async def test_events_committed_while_no_relay_runs_are_published_later(
    pool: asyncpg.Pool, kafka_bootstrap: str
) -> None:
    """A scheduler that dies between commit and publish loses nothing: the next relay
    (any replica) publishes what the outbox holds, then marks it."""
    store = PostgresStore(pool)
    await store.create(placement(P1, "job-1", ["g1"]), REQUEST, PORTS)
    await store.end(Ending(P1, "released", now_ms=2))
    relay = outbox_relay(pool, kafka_bootstrap, poll_s=0.1)
    await relay.start()
    try:
        events = await placement_events(kafka_bootstrap, P1, 2)
        for _ in range(100):
            if relay.published == 2:
                break
            await asyncio.sleep(0.1)
    finally:
        await relay.stop()
    assert [e.event for e in events] == ["created", "released"]
    unpublished = await pool.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL")
    assert unpublished == 0


async def test_the_relay_reads_again_at_once_only_after_a_full_batch(
    pool: asyncpg.Pool, kafka_bootstrap: str
) -> None:
    """Under load the relay reads no faster than it polls, unless the backlog holds a
    batch: five events, batches of two, a poll a minute: read two, two and one at once,
    then wait (without the pacing it would read again at once, finding none)."""
    store = PostgresStore(pool)
    pids = [f"00000000-0000-0000-0000-00000000001{i}" for i in range(5)]
    for i, pid in enumerate(pids):
        await store.create(placement(pid, f"job-{i}", [f"g{i}"], 29500 + i), REQUEST, PORTS)
    relay = outbox_relay(pool, kafka_bootstrap, poll_s=60, batch=2)
    await relay.start()
    try:
        for _ in range(200):
            if relay.published == 5:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(0.3)  # time enough for an unpaced relay's next read
        assert (relay.published, relay.reads) == (5, 3)
    finally:
        await relay.stop()
    # Sent as record batches, each on the partition the producer's default partitioner
    # gives its key (as producer.send would place it).
    parts = list(range(STREAM_PARTITIONS))
    for pid in pids:
        (event,) = await placement_records(kafka_bootstrap, pid, 1)
        assert event.partition == DefaultPartitioner()(pid.encode(), parts, parts)
        assert decode(PlacementEvent, event.value).event == "created"
