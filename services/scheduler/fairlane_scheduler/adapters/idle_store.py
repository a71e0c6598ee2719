"""Postgres storage of idle holdings (migration 0016), one implementation of
:class:`~fairlane_scheduler.idle_watch.IdleStore`: the announced idle episodes, the
namespaces' idle policies, and the leases those policies shorten. Postgres is the
arbiter between replicas: an episode's row is inserted once, and only the transaction
that inserted it writes the ``idle`` event to the outbox."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from typing import Any

import asyncpg

from fairlane_events.codec import encode
from fairlane_scheduler.adapters.pg_pool import pooled
from fairlane_scheduler.adapters.pg_rows import ms_of, placement_of, utc
from fairlane_scheduler.core.idle import IdlePolicy, idle_event
from fairlane_scheduler.core.placements import Placement
from fairlane_scheduler.idle_watch import IdleHolder

__all__ = ["PostgresIdleStore"]

# The live placements that hold any of $1, since when they hold their GPUs, and whether
# their current idle episode was announced already.
_HOLDERS = """SELECT p.*, coalesce(p.placed_at, p.created_at) AS held_since,
           EXISTS (SELECT 1 FROM idle_placements i
                   WHERE i.placement_id = p.id AND i.ended_at IS NULL) AS announced
    FROM placements p WHERE p.state = 'placed' AND EXISTS (
        SELECT 1 FROM allocations a
        WHERE a.live AND a.placement_id = p.id AND a.gpu_uuid = ANY ($1::text[]))"""
# A new episode: none recorded, or the last one ended (busy) before this one began.
_EPISODE = """INSERT INTO idle_placements AS i (placement_id, idle_since, announced_at)
    SELECT $1::uuid, $2, $3 WHERE EXISTS (
        SELECT 1 FROM placements WHERE id = $1::uuid AND state = 'placed')
    ON CONFLICT (placement_id) DO UPDATE
        SET idle_since = EXCLUDED.idle_since, announced_at = EXCLUDED.announced_at,
            ended_at = NULL
        WHERE i.ended_at IS NOT NULL AND i.ended_at < EXCLUDED.idle_since
    RETURNING placement_id"""
# The lease of every live placement in an announced episode whose namespace has a
# policy: at most idle_lease_s after the announcement (a renewal since is undone here).
_CAP = """UPDATE placements p
    SET lease_expires_at = i.announced_at + make_interval(secs => q.idle_lease_s)
    FROM idle_placements i, idle_policies q
    WHERE i.placement_id = p.id AND q.namespace = p.namespace AND p.state = 'placed'
      AND i.ended_at IS NULL AND ($1::uuid IS NULL OR p.id = $1::uuid)
      AND (p.lease_expires_at IS NULL
           OR p.lease_expires_at > i.announced_at + make_interval(secs => q.idle_lease_s))
    RETURNING p.id::text AS id, p.lease_expires_at"""
_OPEN = """SELECT i.placement_id::text AS id, array_agg(a.gpu_uuid ORDER BY a.gpu_uuid) AS gpus
    FROM idle_placements i
    JOIN placements p ON p.id = i.placement_id AND p.state = 'placed'
    JOIN allocations a ON a.placement_id = i.placement_id AND a.live
    WHERE i.ended_at IS NULL
    GROUP BY i.placement_id"""


class PostgresIdleStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        async with pooled(self._pool) as conn:
            return list(await conn.fetch(query, *args))

    async def idle_holders(self, gpus: Collection[str]) -> list[IdleHolder]:
        rows = await self._fetch(_HOLDERS, list(gpus))
        return [
            IdleHolder(placement_of(r), ms_of(r["held_since"]) or 0, r["announced"]) for r in rows
        ]

    async def record_idle(
        self, placement: Placement, idle_since_ms: int, now_ms: int, policy: IdlePolicy
    ) -> bool:
        async with pooled(self._pool) as conn, conn.transaction():
            inserted = await conn.fetch(_EPISODE, placement.id, utc(idle_since_ms), utc(now_ms))
            if not inserted:
                return False
            capped = await conn.fetch(_CAP, placement.id)
            lease_ms = ms_of(capped[0]["lease_expires_at"]) if capped else None
            event = idle_event(placement, idle_since_ms, now_ms, policy, lease_ms)
            await conn.execute(
                "INSERT INTO outbox (placement_id, payload) VALUES ($1::uuid, $2::jsonb)",
                placement.id,
                encode(event).decode(),
            )
        return True

    async def cap_idle_leases(self) -> list[str]:
        return [r["id"] for r in await self._fetch(_CAP, None)]

    async def open_episodes(self) -> dict[str, tuple[str, ...]]:
        return {r["id"]: tuple(r["gpus"]) for r in await self._fetch(_OPEN)}

    async def end_episodes(self, busy_ms: Mapping[str, int]) -> None:
        await self._fetch(
            """UPDATE idle_placements SET ended_at = t.busy
               FROM unnest($1::uuid[], $2::timestamptz[]) AS t(id, busy)
               WHERE placement_id = t.id AND ended_at IS NULL""",
            list(busy_ms),
            [utc(ms) for ms in busy_ms.values()],
        )

    async def idle_lease_s(self, namespace: str) -> float | None:
        rows = await self._fetch(
            "SELECT idle_lease_s FROM idle_policies WHERE namespace = $1", namespace
        )
        return float(rows[0]["idle_lease_s"]) if rows else None

    async def set_idle_lease_s(self, namespace: str, idle_lease_s: float | None) -> None:
        if idle_lease_s is None:
            await self._fetch("DELETE FROM idle_policies WHERE namespace = $1", namespace)
            return
        await self._fetch(
            """INSERT INTO idle_policies (namespace, idle_lease_s) VALUES ($1, $2)
               ON CONFLICT (namespace) DO UPDATE SET idle_lease_s = EXCLUDED.idle_lease_s""",
            namespace,
            idle_lease_s,
        )
