"""Postgres storage of placements (asyncpg). Postgres is the arbiter between replicas:
its unique indexes turn a race for a GPU or a port into :class:`AllocationConflictError`."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import asyncpg
import orjson

from fairlane_events.records import NodeAssignment
from fairlane_scheduler.core.model import Placement
from fairlane_scheduler.errors import AllocationConflictError, DatabaseUnavailableError

__all__ = ["PlacementStore", "connect_pool"]

_UNAVAILABLE = (OSError, asyncpg.PostgresConnectionError, asyncpg.CannotConnectNowError)


async def connect_pool(dsn: str, *, min_size: int = 1, max_size: int = 10) -> asyncpg.Pool:
    try:
        return await asyncpg.create_pool(dsn, min_size=min_size, max_size=max_size, timeout=10)
    except (*_UNAVAILABLE, TimeoutError) as exc:
        raise DatabaseUnavailableError(
            f"Postgres is not reachable ({type(exc).__name__}: {exc}); start it with "
            "`scripts/postgres.sh up` or set DATABASE_URL"
        ) from exc


def _utc(ms: int) -> datetime:
    """Exact to the millisecond (a float division would not be)."""
    return datetime.fromtimestamp(ms // 1000, UTC) + timedelta(milliseconds=ms % 1000)


def _placement(row: asyncpg.Record) -> Placement:
    return Placement(
        id=str(row["id"]),
        job_id=row["job_id"],
        namespace=row["namespace"],
        state=row["state"],
        created_at_ms=round(row["created_at"].timestamp() * 1000),
        nodes=tuple(NodeAssignment.model_validate(n) for n in orjson.loads(row["assignment"])),
        fingerprint=row["request_sha256"],
    )


class PlacementStore:
    def __init__(self, pool: asyncpg.Pool) -> None:
        self._pool = pool

    async def _fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        try:
            async with self._pool.acquire() as conn:
                return list(await conn.fetch(query, *args))
        except _UNAVAILABLE as exc:
            raise DatabaseUnavailableError(f"Postgres does not answer: {exc}") from exc

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

    async def live_gpus(self) -> set[str]:
        rows = await self._fetch("SELECT gpu_uuid FROM allocations WHERE live")
        return {r["gpu_uuid"] for r in rows}

    async def live_ports(self, node: str) -> set[int]:
        rows = await self._fetch(
            "SELECT master_port FROM placements WHERE state = 'placed' AND master_node = $1", node
        )
        return {r["master_port"] for r in rows}

    async def insert(self, placement: Placement, request_json: bytes) -> None:
        """Store the placement and its allocations in one transaction."""
        master = placement.nodes[0]
        try:
            async with self._pool.acquire() as conn, conn.transaction():
                await conn.execute(
                    """INSERT INTO placements (id, namespace, job_id, request, request_sha256,
                           state, master_node, master_port, assignment, created_at)
                       VALUES ($1::uuid, $2, $3, $4::jsonb, $5, $6, $7, $8, $9::jsonb, $10)""",
                    placement.id,
                    placement.namespace,
                    placement.job_id,
                    request_json.decode(),
                    placement.fingerprint,
                    placement.state,
                    master.master_addr,
                    master.master_port,
                    orjson.dumps([n.model_dump(mode="json") for n in placement.nodes]).decode(),
                    _utc(placement.created_at_ms),
                )
                await conn.executemany(
                    """INSERT INTO allocations (placement_id, node, gpu_uuid, gpu_index, score)
                       VALUES ($1::uuid, $2, $3, $4, $5)""",
                    [
                        (placement.id, node.node, g.uuid, g.index, placement.gpu_scores[g.uuid])
                        for node in placement.nodes
                        for g in node.gpus
                    ],
                )
        except asyncpg.UniqueViolationError as exc:
            raise AllocationConflictError(str(exc)) from exc
        except _UNAVAILABLE as exc:
            raise DatabaseUnavailableError(f"Postgres does not answer: {exc}") from exc
