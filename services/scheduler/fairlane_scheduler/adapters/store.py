"""Postgres storage of placements (asyncpg), one implementation of
:class:`~fairlane_scheduler.storage.PlacementStore`. Postgres is the arbiter between
replicas: its unique indexes turn a race for a GPU or a port into
:class:`AllocationConflictError`, and every state change writes its outbox event in the
same transaction. A placement and a release are one statement each (the server-side
functions of migration 0007); asyncpg prepares each statement once per connection."""

from __future__ import annotations

import ssl as ssl_module
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson

from fairlane_events.codec import encode
from fairlane_events.records import NodeAssignment
from fairlane_scheduler.core.ledger import Holding
from fairlane_scheduler.core.placements import (
    EventKind,
    Placement,
    PlacementRequest,
    placement_event,
    request_from_json,
    request_to_json,
)
from fairlane_scheduler.core.quota import Quota
from fairlane_scheduler.errors import (
    AllocationConflictError,
    DatabaseTlsError,
    DatabaseUnavailableError,
)
from fairlane_scheduler.storage import (
    JobTaken,
    NoFreePort,
    NotPending,
    OverQuota,
    PortRange,
    WriteOutcome,
    Written,
)

__all__ = ["POSTGRES_UNAVAILABLE", "PostgresStore", "connect_pool", "utc"]

#: What asyncpg raises while Postgres is away: refused or dropped connections (OSError,
#: class 08), a server shutting down or starting (57P01-57P03), and a query on a pooled
#: connection still consuming the shutdown's unsolicited error (InternalClientError,
#: "cannot switch to state 12; another operation (2) is in progress": seen in the chaos
#: suite's Postgres outage). Anything else, a cancelled statement (57014) included, is
#: not an outage.
POSTGRES_UNAVAILABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.InternalClientError,
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


def _quota(row: Any) -> Quota:
    per_model = row["max_gpus_per_model"]
    return Quota(
        row["max_gpus"], orjson.loads(per_model) if isinstance(per_model, str) else per_model
    )


def _why(placement: Placement) -> str | None:
    return "placed below the capacity threshold (best_available)" if placement.fallback else None


def _lease(placement: Placement) -> datetime | None:
    ms = placement.lease_expires_at_ms
    return None if ms is None else utc(ms)


def _writes(placement: Placement, kind: EventKind, ts_ms: int) -> list[Any]:
    """The arguments every write function takes after the placement's own: master node,
    proposed port, assignment, event, and one array per allocation column."""
    master = placement.nodes[0] if placement.nodes else None
    gpus = [(n.node, g) for n in placement.nodes for g in n.gpus]
    event = placement_event(placement, kind, ts_ms, _why(placement))
    return [
        None if master is None else master.master_addr,
        None if master is None else master.master_port,
        orjson.dumps([n.model_dump(mode="json") for n in placement.nodes]).decode(),
        encode(event).decode(),
        [g.uuid for _, g in gpus],
        [node for node, _ in gpus],
        [g.index for _, g in gpus],
        [placement.gpu_scores[g.uuid] for _, g in gpus],
        [placement.gpu_models.get(g.uuid, "") for _, g in gpus],
    ]


def _outcome(row: asyncpg.Record, placement: Placement) -> WriteOutcome:
    outcome = row["outcome"]
    if outcome == "created":
        port = row["port"]
        if port != placement.nodes[0].master_port:  # the database gave another free port
            nodes = tuple(n.model_copy(update={"master_port": port}) for n in placement.nodes)
            placement = replace(placement, nodes=nodes)
        return Written(placement)
    if outcome == "pending":
        return Written(placement)
    if outcome == "exists":
        return JobTaken()
    if outcome == "gone":
        return NotPending()
    if outcome == "no_port":
        return NoFreePort()
    detail = orjson.loads(row["detail"])
    return OverQuota(_quota(detail), detail["used"])


_PLACE = """SELECT * FROM fairlane_place($1::uuid, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10,
    $11, $12, $13, $14, $15::jsonb, $16::jsonb, $17, $18, $19, $20, $21)"""
_PROMOTE = """SELECT * FROM fairlane_promote($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9,
    $10::jsonb, $11::jsonb, $12, $13, $14, $15, $16)"""
_HOLDINGS = """SELECT p.id::text AS id, p.namespace, p.master_node, p.master_port,
           array_agg(a.gpu_uuid ORDER BY a.gpu_uuid) AS gpus,
           array_agg(a.model ORDER BY a.gpu_uuid) AS models
    FROM placements p JOIN allocations a ON a.placement_id = p.id AND a.live
    WHERE p.state = 'placed' GROUP BY p.id"""


class PostgresStore:
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
        try:
            async with self._conn() as conn:
                return list(await conn.fetch(query, *args))
        except asyncpg.UniqueViolationError as exc:
            raise AllocationConflictError(str(exc)) from exc

    async def ping(self) -> None:
        await self._fetch("SELECT 1")

    async def create(
        self, placement: Placement, request: PlacementRequest, ports: PortRange
    ) -> WriteOutcome:
        kind: EventKind = "created" if placement.is_live else "pending"
        writes = _writes(placement, kind, placement.created_at_ms)
        (row,) = await self._fetch(
            _PLACE,
            placement.id,
            placement.namespace,
            placement.job_id,
            request_to_json(request).decode(),
            placement.fingerprint,
            placement.state,
            utc(placement.created_at_ms),
            _lease(placement),
            request.priority,
            placement.fallback,
            *writes[:2],
            ports.first,
            ports.last,
            *writes[2:],
        )
        return _outcome(row, placement)

    async def promote(self, placement: Placement, now_ms: int, ports: PortRange) -> WriteOutcome:
        writes = _writes(placement, "created", now_ms)
        (row,) = await self._fetch(
            _PROMOTE,
            placement.id,
            placement.namespace,
            utc(now_ms),
            _lease(placement),
            placement.fallback,
            *writes[:2],
            ports.first,
            ports.last,
            *writes[2:],
        )
        return _outcome(row, placement)

    async def end(
        self,
        placement_id: str,
        state: EventKind,
        now_ms: int,
        reason: str | None = None,
        namespace: str | None = None,
    ) -> tuple[Placement | None, bool]:
        rows = await self._fetch(
            "SELECT * FROM fairlane_end($1::uuid, $2, $3, $4, $5, $6)",
            placement_id,
            state,
            utc(now_ms),
            now_ms,
            reason,
            namespace,
        )
        if not rows:
            return None, False
        return _placement(rows[0]["placement"]), rows[0]["ended"]

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

    async def holdings(self) -> list[Holding]:
        return [
            Holding(
                r["id"],
                r["namespace"],
                r["master_node"],
                r["master_port"],
                tuple(r["gpus"]),
                tuple(r["models"]),
            )
            for r in await self._fetch(_HOLDINGS)
        ]

    async def quotas(self) -> dict[str, Quota]:
        return {r["namespace"]: _quota(r) for r in await self._fetch("SELECT * FROM quotas")}

    async def quota_and_usage(self, namespace: str) -> tuple[Quota | None, dict[str, int]]:
        rows = await self._fetch(
            """SELECT q.max_gpus, q.max_gpus_per_model,
                      (SELECT coalesce(jsonb_object_agg(model, n), '{}') FROM (
                          SELECT model, count(*) AS n FROM allocations
                          WHERE live AND namespace = $1 GROUP BY model) AS u) AS used
               FROM (SELECT 1) AS one LEFT JOIN quotas q ON q.namespace = $1""",
            namespace,
        )
        row = rows[0]
        quota = None if row["max_gpus_per_model"] is None else _quota(row)
        return quota, orjson.loads(row["used"])

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

    async def backlog(self) -> tuple[int, int]:
        rows = await self._fetch(
            """SELECT (SELECT count(*) FROM outbox WHERE published_at IS NULL) AS outbox,
                      (SELECT count(*) FROM placements WHERE state = 'pending') AS pending"""
        )
        return int(rows[0]["outbox"]), int(rows[0]["pending"])

    async def pending(self, limit: int = 100) -> list[tuple[Placement, PlacementRequest]]:
        rows = await self._fetch(
            """SELECT * FROM placements WHERE state = 'pending'
               ORDER BY priority DESC, created_at LIMIT $1""",
            limit,
        )
        return [(_placement(r), request_from_json(r["request"])) for r in rows]

    async def renew(
        self, placement_id: str, now_ms: int, lease_s: float | None
    ) -> Placement | None:
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
