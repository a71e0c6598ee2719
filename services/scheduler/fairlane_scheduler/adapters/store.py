"""Postgres storage of placements (asyncpg). Postgres is the arbiter between replicas:
its unique indexes turn a race for a GPU or a port into :class:`AllocationConflictError`,
and every state change writes its outbox event in the same transaction."""

from __future__ import annotations

import ssl as ssl_module
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson

from fairlane_events.codec import encode
from fairlane_events.records import NodeAssignment
from fairlane_scheduler.core.model import (
    EventKind,
    Placement,
    PlacementRequest,
    placement_event,
    request_from_json,
    request_to_json,
)
from fairlane_scheduler.core.quota import Quota, check_quota
from fairlane_scheduler.errors import (
    AllocationConflictError,
    DatabaseTlsError,
    DatabaseUnavailableError,
    QuotaExceededError,
)

__all__ = ["POSTGRES_UNAVAILABLE", "PlacementStore", "connect_pool", "utc"]

#: What asyncpg raises while Postgres is away: refused or dropped connections (OSError,
#: class 08) and a server shutting down or starting (57P01-57P03). Anything else, a
#: cancelled statement (57014) included, is not an outage.
POSTGRES_UNAVAILABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
)
_UNAVAILABLE = POSTGRES_UNAVAILABLE


async def connect_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    ssl: ssl_module.SSLContext | str | None = None,
) -> asyncpg.Pool:
    """A started pool; ``ssl`` as :func:`fairlane_scheduler.adapters.pg_tls.client_ssl`
    gives it. A certificate that fails verification is :class:`DatabaseTlsError`."""
    try:
        return await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, timeout=10, ssl=ssl
        )
    except ssl_module.SSLCertVerificationError as exc:
        raise DatabaseTlsError(
            f"Postgres's certificate was refused: {exc.verify_message.rstrip('.')}; check "
            "the host name in DATABASE_URL against the certificate and "
            "FAIRLANE_DATABASE_SSLROOTCERT"
        ) from exc
    except (*_UNAVAILABLE, TimeoutError) as exc:
        raise DatabaseUnavailableError(
            f"Postgres is not reachable ({type(exc).__name__}: {exc}); start it with "
            "`scripts/postgres.sh up` or set DATABASE_URL"
        ) from exc


def utc(ms: int) -> datetime:
    """Exact to the millisecond (a float division would not be)."""
    return datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)


def _ms(value: datetime | None) -> int | None:
    return None if value is None else round(value.timestamp() * 1000)


def _placement(row: asyncpg.Record) -> Placement:
    return Placement(
        id=str(row["id"]),
        job_id=row["job_id"],
        namespace=row["namespace"],
        state=row["state"],
        created_at_ms=round(row["created_at"].timestamp() * 1000),
        nodes=tuple(NodeAssignment.model_validate(n) for n in orjson.loads(row["assignment"])),
        fingerprint=row["request_sha256"],
        lease_expires_at_ms=_ms(row["lease_expires_at"]),
        ended_at_ms=_ms(row["ended_at"]),
        fallback=row["fallback"],
    )


async def _add_event(
    conn: asyncpg.Connection, placement: Placement, kind: EventKind, now_ms: int, reason: str | None
) -> None:
    event = placement_event(placement, kind, now_ms, reason)
    await conn.execute(
        "INSERT INTO outbox (placement_id, payload) VALUES ($1::uuid, $2::jsonb)",
        placement.id,
        encode(event).decode(),
    )
    await conn.execute("NOTIFY fairlane_outbox")


def _quota(row: asyncpg.Record) -> Quota:
    return Quota(row["max_gpus"], orjson.loads(row["max_gpus_per_model"]))


async def _usage(conn: asyncpg.Connection, namespace: str) -> dict[str, int]:
    rows = await conn.fetch(
        "SELECT model, count(*) AS n FROM allocations WHERE live AND namespace = $1 GROUP BY model",
        namespace,
    )
    return {r["model"]: r["n"] for r in rows}


def _why(placement: Placement) -> str | None:
    return "placed below the capacity threshold (best_available)" if placement.fallback else None


def _assignment_json(placement: Placement) -> str:
    return orjson.dumps([n.model_dump(mode="json") for n in placement.nodes]).decode()


def _lease(placement: Placement) -> datetime | None:
    ms = placement.lease_expires_at_ms
    return None if ms is None else utc(ms)


async def _allocate(conn: asyncpg.Connection, placement: Placement) -> None:
    await _enforce_quota(conn, placement)
    await conn.executemany(
        """INSERT INTO allocations
               (placement_id, node, gpu_uuid, gpu_index, score, namespace, model)
           VALUES ($1::uuid, $2, $3, $4, $5, $6, $7)""",
        [
            (
                placement.id,
                node.node,
                g.uuid,
                g.index,
                placement.gpu_scores[g.uuid],
                placement.namespace,
                placement.gpu_models.get(g.uuid, ""),
            )
            for node in placement.nodes
            for g in node.gpus
        ],
    )


async def _enforce_quota(conn: asyncpg.Connection, placement: Placement) -> None:
    """Inside the placing transaction: the quota row's lock serialises a namespace's
    placements, so concurrent replicas cannot together exceed it."""
    row = await conn.fetchrow(
        "SELECT * FROM quotas WHERE namespace = $1 FOR UPDATE", placement.namespace
    )
    if row is None:
        return
    wanted: dict[str, int] = {}
    for model in placement.gpu_models.values():
        wanted[model] = wanted.get(model, 0) + 1
    verdict = check_quota(_quota(row), await _usage(conn, placement.namespace), wanted)
    if verdict is not None:
        raise QuotaExceededError.of(verdict.reason, ever=verdict.ever)


class PlacementStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    @asynccontextmanager
    async def _conn(self) -> AsyncIterator[asyncpg.Connection]:
        try:
            async with self._pool.acquire() as conn:
                yield conn
        except _UNAVAILABLE as exc:
            raise DatabaseUnavailableError(f"Postgres does not answer: {exc}") from exc

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with self._conn() as conn:
            return list(await conn.fetch(query, *args))

    async def ping(self) -> None:
        await self._fetch("SELECT 1")

    async def get(self, placement_id: str) -> Placement | None:
        rows = await self._fetch("SELECT * FROM placements WHERE id = $1::uuid", placement_id)
        return _placement(rows[0]) if rows else None

    async def find_job(self, namespace: str, job_id: str) -> Placement | None:
        rows = await self._fetch(
            "SELECT * FROM placements WHERE namespace = $1 AND job_id = $2", namespace, job_id
        )
        return _placement(rows[0]) if rows else None

    async def page(
        self, namespace: str | None, state: str | None, limit: int, before_ms: int | None
    ) -> list[Placement]:
        """Newest first; ``before_ms`` continues after the last page's ``created_at_ms``."""
        rows = await self._fetch(
            """SELECT * FROM placements
               WHERE ($1::text IS NULL OR namespace = $1) AND ($2::text IS NULL OR state = $2)
                 AND ($3::timestamptz IS NULL OR created_at < $3)
               ORDER BY created_at DESC, id LIMIT $4""",
            namespace,
            state,
            None if before_ms is None else utc(before_ms),
            limit,
        )
        return [_placement(r) for r in rows]

    async def quota_and_usage(self, namespace: str) -> tuple[Quota | None, dict[str, int]]:
        async with self._conn() as conn:
            row = await conn.fetchrow("SELECT * FROM quotas WHERE namespace = $1", namespace)
            return (None if row is None else _quota(row)), await _usage(conn, namespace)

    async def set_quota(self, namespace: str, quota: Quota) -> None:
        await self._fetch(
            """INSERT INTO quotas (namespace, max_gpus, max_gpus_per_model)
               VALUES ($1, $2, $3::jsonb)
               ON CONFLICT (namespace) DO UPDATE
               SET max_gpus = EXCLUDED.max_gpus,
                   max_gpus_per_model = EXCLUDED.max_gpus_per_model""",
            namespace,
            quota.max_gpus,
            orjson.dumps(dict(quota.max_gpus_per_model)).decode(),
        )

    async def cordon(self, node: str, reason: str) -> None:
        await self._fetch(
            """INSERT INTO cordons (node, reason) VALUES ($1, $2)
               ON CONFLICT (node) DO UPDATE SET reason = EXCLUDED.reason""",
            node,
            reason,
        )

    async def uncordon(self, node: str) -> None:
        await self._fetch("DELETE FROM cordons WHERE node = $1", node)

    async def cordoned(self) -> dict[str, str]:
        return {r["node"]: r["reason"] for r in await self._fetch("SELECT * FROM cordons")}

    async def live_gpus(self) -> set[str]:
        rows = await self._fetch("SELECT gpu_uuid FROM allocations WHERE live")
        return {r["gpu_uuid"] for r in rows}

    async def live_ports(self, node: str) -> set[int]:
        rows = await self._fetch(
            "SELECT master_port FROM placements WHERE state = 'placed' AND master_node = $1", node
        )
        return {r["master_port"] for r in rows}

    async def insert(self, placement: Placement, request: PlacementRequest) -> None:
        """Store a new placement in one transaction: a placed one with its allocations
        (quota checked) and ``created`` event, a waiting one with its ``pending`` event."""
        master = placement.nodes[0] if placement.nodes else None
        try:
            async with self._conn() as conn, conn.transaction():
                await conn.execute(
                    """INSERT INTO placements (id, namespace, job_id, request, request_sha256,
                           state, master_node, master_port, assignment, created_at,
                           lease_expires_at, priority, placed_at, fallback)
                       VALUES ($1::uuid, $2, $3, $4::jsonb, $5, $6, $7, $8, $9::jsonb, $10,
                               $11, $12, $13, $14)""",
                    placement.id,
                    placement.namespace,
                    placement.job_id,
                    request_to_json(request).decode(),
                    placement.fingerprint,
                    placement.state,
                    None if master is None else master.master_addr,
                    None if master is None else master.master_port,
                    _assignment_json(placement),
                    utc(placement.created_at_ms),
                    _lease(placement),
                    request.priority,
                    utc(placement.created_at_ms) if placement.is_live else None,
                    placement.fallback,
                )
                if placement.is_live:
                    await _allocate(conn, placement)
                kind: EventKind = "created" if placement.is_live else "pending"
                await _add_event(conn, placement, kind, placement.created_at_ms, _why(placement))
        except asyncpg.UniqueViolationError as exc:
            raise AllocationConflictError(str(exc)) from exc

    async def promote(self, placement: Placement, now_ms: int) -> bool:
        """Give a pending placement its GPUs (allocations, quota, ``created`` event, one
        transaction). False when it is no longer pending (placed or cancelled meanwhile)."""
        master = placement.nodes[0]
        try:
            async with self._conn() as conn, conn.transaction():
                row = await conn.fetchrow(
                    """UPDATE placements SET state = 'placed', master_node = $2, master_port = $3,
                           assignment = $4::jsonb, lease_expires_at = $5, placed_at = $6,
                           fallback = $7
                       WHERE id = $1::uuid AND state = 'pending' RETURNING id""",
                    placement.id,
                    master.master_addr,
                    master.master_port,
                    _assignment_json(placement),
                    _lease(placement),
                    utc(now_ms),
                    placement.fallback,
                )
                if row is None:
                    return False
                await _allocate(conn, placement)
                await _add_event(conn, placement, "created", now_ms, _why(placement))
                return True
        except asyncpg.UniqueViolationError as exc:
            raise AllocationConflictError(str(exc)) from exc

    async def backlog(self) -> tuple[int, int]:
        """Outbox events not yet published, and placements waiting in the queue."""
        rows = await self._fetch(
            """SELECT (SELECT count(*) FROM outbox WHERE published_at IS NULL) AS outbox,
                      (SELECT count(*) FROM placements WHERE state = 'pending') AS pending"""
        )
        return int(rows[0]["outbox"]), int(rows[0]["pending"])

    async def pending(self, limit: int = 100) -> list[tuple[Placement, PlacementRequest]]:
        """Waiting placements, highest priority first, then oldest."""
        rows = await self._fetch(
            """SELECT * FROM placements WHERE state = 'pending'
               ORDER BY priority DESC, created_at LIMIT $1""",
            limit,
        )
        return [(_placement(r), request_from_json(r["request"])) for r in rows]

    async def end(
        self, placement_id: str, state: EventKind, now_ms: int, reason: str | None = None
    ) -> Placement | None:
        """End an open placement (released, expired, failed): free its GPUs, write the
        event. None when it was not open (already ended, or unknown)."""
        async with self._conn() as conn, conn.transaction():
            row = await conn.fetchrow(
                """UPDATE placements SET state = $2, ended_at = $3
                   WHERE id = $1::uuid AND state IN ('pending', 'placed') RETURNING *""",
                placement_id,
                state,
                utc(now_ms),
            )
            if row is None:
                return None
            await conn.execute(
                "UPDATE allocations SET live = false WHERE placement_id = $1::uuid", placement_id
            )
            ended = _placement(row)
            await _add_event(conn, ended, state, now_ms, reason)
            return ended

    async def renew(
        self, placement_id: str, now_ms: int, lease_s: float | None
    ) -> Placement | None:
        """Extend a live placement's lease to now + ``lease_s`` (default: the lease it was
        placed with). None when it is not live or has no lease to renew."""
        rows = await self._fetch(
            """WITH lease AS (
                   SELECT COALESCE($3::float8, (request->>'lease_s')::float8) AS s
                   FROM placements WHERE id = $1::uuid)
               UPDATE placements
               SET lease_expires_at = $2::timestamptz + make_interval(secs => lease.s)
               FROM lease
               WHERE id = $1::uuid AND state = 'placed' AND lease.s IS NOT NULL
               RETURNING placements.*""",
            placement_id,
            utc(now_ms),
            lease_s,
        )
        return _placement(rows[0]) if rows else None

    async def due_for_expiry(self, now_ms: int, limit: int = 100) -> list[str]:
        rows = await self._fetch(
            """SELECT id FROM placements WHERE state = 'placed' AND lease_expires_at <= $1
               ORDER BY lease_expires_at LIMIT $2""",
            utc(now_ms),
            limit,
        )
        return [str(r["id"]) for r in rows]
