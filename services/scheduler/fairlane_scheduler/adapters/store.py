"""Postgres storage of placements (asyncpg), one implementation of
:class:`~fairlane_scheduler.storage.PlacementStore`. Postgres is the arbiter between
replicas: its unique indexes turn a race for a GPU or a port into
:class:`AllocationConflictError`, and every state change writes its outbox event in the
same transaction. A placement and a release are one statement each (the server-side
functions of migration 0007), a batch of either too (0011: one array per column);
asyncpg prepares each statement once per connection."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from itertools import accumulate
from typing import Any

import asyncpg
import orjson

from fairlane_events.codec import encode
from fairlane_events.records import SlowGpu
from fairlane_scheduler.adapters.pg_pool import pooled
from fairlane_scheduler.adapters.pg_rows import (
    lease_of,
    outcome_of,
    placement_of,
    quota_of,
    share_args,
    utc,
    write_args,
)
from fairlane_scheduler.core.degraded import degraded_event
from fairlane_scheduler.core.ledger import Holding
from fairlane_scheduler.core.master_port import PortRange
from fairlane_scheduler.core.placements import (
    EventKind,
    Placement,
    PlacementRequest,
    request_from_json,
    request_to_json,
)
from fairlane_scheduler.core.quota import Quota
from fairlane_scheduler.core.shares import GpuUse
from fairlane_scheduler.errors import AllocationConflictError
from fairlane_scheduler.storage import Ending, WriteOutcome

__all__ = ["PostgresStore"]

_PLACE = """SELECT * FROM fairlane_place($1::uuid, $2, $3, $4::jsonb, $5, $6, $7, $8, $9, $10,
    $11, $12, $13, $14, $15::jsonb, $16::jsonb, $17, $18, $19, $20, $21)"""
_PLACE_MANY = """SELECT * FROM fairlane_place_many($1::uuid[], $2, $3, $4::jsonb[], $5, $6, $7,
    $8, $9, $10, $11, $12, $13, $14, $15::jsonb[], $16::jsonb[], $17, $18, $19, $20, $21, $22)"""
_PROMOTE = """SELECT * FROM fairlane_promote($1::uuid, $2, $3, $4, $5, $6, $7, $8, $9,
    $10::jsonb, $11::jsonb, $12, $13, $14, $15, $16)"""
_PLACE_SHARE = """SELECT * FROM fairlane_place_share($1::uuid, $2, $3, $4::jsonb, $5, $6, $7,
    $8, $9, $10, $11, $12, $13, $14::jsonb, $15::jsonb, $16, $17, $18, $19, $20, $21, $22,
    $23)"""
_PROMOTE_SHARE = """SELECT * FROM fairlane_promote_share($1::uuid, $2, $3, $4, $5, $6, $7, $8,
    $9, $10::jsonb, $11::jsonb, $12, $13, $14, $15, $16, $17, $18, $19)"""
_HOLDINGS = """SELECT p.id::text AS id, p.namespace, p.master_node, p.master_port,
           array_agg(a.gpu_uuid ORDER BY a.gpu_uuid) AS gpus,
           array_agg(a.model ORDER BY a.gpu_uuid) AS models,
           min(a.share_milli) AS share_milli, min(a.memory_mib) AS memory_mib,
           bool_or(a.gpu_memory_mib IS NOT NULL) AS shared
    FROM placements p JOIN allocations a ON a.placement_id = p.id AND a.live
    WHERE p.id = ANY ($1::uuid[]) AND p.state = 'placed' GROUP BY p.id"""
_LIVE_HOLDING = """SELECT p.*, p.request->>'job_class' AS job_class FROM placements p
    WHERE p.state = 'placed' AND EXISTS (
        SELECT 1 FROM allocations a
        WHERE a.live AND a.placement_id = p.id AND a.gpu_uuid = ANY ($1::text[]))"""
# Only rows this transaction inserts come back: another replica's (or an earlier run's)
# announcement of the same (placement, GPU, source) is not announced again; a placement
# no longer live announces nothing.
_RECORD_DEGRADED = """INSERT INTO degraded_gpus
        (placement_id, gpu_uuid, source, speed, announced_at)
    SELECT $1::uuid, u, s, v, $5 FROM unnest($2::text[], $3::text[], $4::float8[]) AS t(u, s, v)
    WHERE EXISTS (SELECT 1 FROM placements WHERE id = $1::uuid AND state = 'placed')
    ON CONFLICT DO NOTHING RETURNING gpu_uuid, source"""


def _place_args(placement: Placement, request: PlacementRequest) -> list[Any]:
    """fairlane_place's arguments but the port range (0007; 0008 takes them as JSON)."""
    kind: EventKind = "created" if placement.is_live else "pending"
    writes = write_args(placement, kind, placement.created_at_ms)
    return [
        placement.id,
        placement.namespace,
        placement.job_id,
        request_to_json(request).decode(),
        placement.fingerprint,
        placement.state,
        utc(placement.created_at_ms),
        lease_of(placement),
        request.priority,
        placement.fallback,
        *writes,
    ]


def _place_columns(
    batch: Sequence[tuple[Placement, PlacementRequest]], ports: PortRange
) -> list[Any]:
    """fairlane_place_many's arguments (0011): one array per argument of fairlane_place,
    the allocations of all placements flattened, and where each placement's end."""
    columns = [list(c) for c in zip(*(_place_args(p, r) for p, r in batch), strict=True)]
    allocations = columns[14:]
    ends = list(accumulate(len(gpus) for gpus in allocations[0]))
    flat = [[value for per_placement in c for value in per_placement] for c in allocations]
    return [*columns[:12], ports.first, ports.last, *columns[12:14], ends, *flat]


class PostgresStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        try:
            async with pooled(self._pool) as conn:
                return list(await conn.fetch(query, *args))
        except asyncpg.UniqueViolationError as exc:
            raise AllocationConflictError(str(exc)) from exc
        except asyncpg.CheckViolationError as exc:
            # A GPU's shares or memory over-committed by one statement alone (migration
            # 0015's trigger raises other over-commits as a unique violation): the same race.
            if exc.table_name != "gpu_shares":
                raise
            raise AllocationConflictError(str(exc)) from exc
        except asyncpg.TransactionRollbackError as exc:
            # A deadlock (or serialization failure) with another replica's batch: Postgres
            # rolled this transaction back whole, so trying again is safe.
            raise AllocationConflictError(f"rolled back, to be retried: {exc}") from exc

    async def ping(self) -> None:
        await self._fetch("SELECT 1")

    async def create(
        self, placement: Placement, request: PlacementRequest, ports: PortRange
    ) -> WriteOutcome:
        args = _place_args(placement, request)
        if placement.shared_gpu_memory_mib is not None:  # a share: its GPU's row alone
            del args[5]  # the state: a share is placed, never written pending
            range_at = 11
            query, args = _PLACE_SHARE, [*args[:-5], *share_args(placement)]
        else:
            range_at, query = 12, _PLACE
        (row,) = await self._fetch(
            query, *args[:range_at], ports.first, ports.last, *args[range_at:]
        )
        return outcome_of(row, placement)

    async def create_many(
        self, batch: Sequence[tuple[Placement, PlacementRequest]], ports: PortRange
    ) -> list[WriteOutcome | None]:
        (row,) = await self._fetch(_PLACE_MANY, *_place_columns(batch, ports))
        answers = zip(row["outcomes"], row["ports"], row["details"], strict=True)
        return [
            None
            if outcome == "conflict"
            else outcome_of({"outcome": outcome, "port": port, "detail": detail}, placement)
            for (placement, _), (outcome, port, detail) in zip(batch, answers, strict=True)
        ]

    async def promote(self, placement: Placement, now_ms: int, ports: PortRange) -> WriteOutcome:
        writes = write_args(placement, "created", now_ms)
        (row,) = await self._fetch(
            _PROMOTE if placement.shared_gpu_memory_mib is None else _PROMOTE_SHARE,
            placement.id,
            placement.namespace,
            utc(now_ms),
            lease_of(placement),
            placement.fallback,
            *writes[:2],
            ports.first,
            ports.last,
            *writes[2:4],
            *(writes[4:] if placement.shared_gpu_memory_mib is None else share_args(placement)),
        )
        return outcome_of(row, placement)

    async def end(self, ending: Ending) -> tuple[Placement | None, bool]:
        rows = await self._fetch(
            "SELECT * FROM fairlane_end($1::uuid, $2, $3, $4, $5, $6)",
            ending.placement_id,
            ending.state,
            utc(ending.now_ms),
            ending.now_ms,
            ending.reason,
            ending.namespace,
        )
        if not rows:
            return None, False
        return placement_of(rows[0]["placement"]), rows[0]["ended"]

    async def end_many(self, endings: Sequence[Ending]) -> list[tuple[Placement | None, bool]]:
        rows = await self._fetch(
            "SELECT * FROM fairlane_end_many($1::uuid[], $2, $3, $4, $5, $6)",
            [e.placement_id for e in endings],
            [e.state for e in endings],
            [utc(e.now_ms) for e in endings],
            [e.now_ms for e in endings],
            [e.reason for e in endings],
            [e.namespace for e in endings],
        )
        answers: list[tuple[Placement | None, bool]] = [(None, False)] * len(endings)
        for row in rows:
            answers[row["i"] - 1] = placement_of(row), row["ended"]
        return answers

    async def get(self, placement_id: str) -> Placement | None:
        rows = await self._fetch("SELECT * FROM placements WHERE id = $1::uuid", placement_id)
        return placement_of(rows[0]) if rows else None

    async def find_job(self, namespace: str, job_id: str) -> Placement | None:
        rows = await self._fetch(
            "SELECT * FROM placements WHERE namespace = $1 AND job_id = $2", namespace, job_id
        )
        return placement_of(rows[0]) if rows else None

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
        return [placement_of(r) for r in rows]

    async def live_ids(self) -> list[str]:
        rows = await self._fetch("SELECT id::text AS id FROM placements WHERE state = 'placed'")
        return [r["id"] for r in rows]

    async def holdings(self, ids: Collection[str]) -> list[Holding]:
        return [
            Holding(
                r["id"],
                r["namespace"],
                r["master_node"],
                r["master_port"],
                tuple(r["gpus"]),
                tuple(r["models"]),
                GpuUse(r["share_milli"], r["memory_mib"] or 0, 1) if r["shared"] else None,
            )
            for r in await self._fetch(_HOLDINGS, list(ids))
        ]

    async def live_holding(self, gpus: Collection[str]) -> list[tuple[Placement, str | None]]:
        rows = await self._fetch(_LIVE_HOLDING, list(gpus))
        return [(placement_of(r), r["job_class"]) for r in rows]

    async def record_degraded(
        self, placement: Placement, slow: Sequence[SlowGpu], now_ms: int
    ) -> list[SlowGpu]:
        async with pooled(self._pool) as conn, conn.transaction():
            rows = await conn.fetch(
                _RECORD_DEGRADED,
                placement.id,
                [g.uuid for g in slow],
                [g.source for g in slow],
                [g.speed for g in slow],
                utc(now_ms),
            )
            inserted = {(r["gpu_uuid"], r["source"]) for r in rows}
            new = [g for g in slow if (g.uuid, g.source) in inserted]
            if new:
                event = encode(degraded_event(placement, new, now_ms)).decode()
                await conn.execute(
                    "INSERT INTO outbox (placement_id, payload) VALUES ($1::uuid, $2::jsonb)",
                    placement.id,
                    event,
                )
        return new

    async def quotas(self) -> dict[str, Quota]:
        return {r["namespace"]: quota_of(r) for r in await self._fetch("SELECT * FROM quotas")}

    async def quota_and_usage(self, namespace: str) -> tuple[Quota | None, dict[str, float]]:
        rows = await self._fetch(
            """SELECT q.max_gpus, q.max_gpus_per_model,
                      (SELECT coalesce(jsonb_object_agg(model, n), '{}') FROM (
                          SELECT model, sum(share_milli) / 1000.0 AS n FROM allocations
                          WHERE live AND namespace = $1 GROUP BY model) AS u) AS used
               FROM (SELECT 1) AS one LEFT JOIN quotas q ON q.namespace = $1""",
            namespace,
        )
        row = rows[0]
        quota = None if row["max_gpus_per_model"] is None else quota_of(row)
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
        return [(placement_of(r), request_from_json(r["request"])) for r in rows]

    async def renew(
        self, placement_id: str, now_ms: int, lease_s: float | None
    ) -> Placement | None:
        # An announced idle placement in a namespace with an idle policy (migration 0016)
        # is not renewed past the end its policy set (LEAST ignores the NULL of others).
        rows = await self._fetch(
            """WITH lease AS (
                   SELECT COALESCE($3::float8, (p.request->>'lease_s')::float8) AS s,
                          (SELECT i.announced_at + make_interval(secs => q.idle_lease_s)
                           FROM idle_placements i
                           JOIN idle_policies q ON q.namespace = p.namespace
                           WHERE i.placement_id = p.id AND i.ended_at IS NULL) AS idle_end
                   FROM placements p WHERE p.id = $1::uuid)
               UPDATE placements
               SET lease_expires_at = LEAST(
                   $2::timestamptz + make_interval(secs => lease.s), lease.idle_end)
               FROM lease
               WHERE id = $1::uuid AND state = 'placed' AND lease.s IS NOT NULL
               RETURNING placements.*""",
            placement_id,
            utc(now_ms),
            lease_s,
        )
        return placement_of(rows[0]) if rows else None

    async def due_for_expiry(self, now_ms: int, limit: int = 100) -> list[str]:
        rows = await self._fetch(
            """SELECT id FROM placements WHERE state = 'placed' AND lease_expires_at <= $1
               ORDER BY lease_expires_at LIMIT $2""",
            utc(now_ms),
            limit,
        )
        return [str(r["id"]) for r in rows]
