"""The outbox relay: publishes committed placement events to ``fairlane.placements.v1``.

At least once and in order per placement: one replica at a time holds the relay's
advisory lock (the others stand by), reads unpublished rows in id order, sends them
keyed by placement id (one partition per placement, idempotent producer), and marks
them published only after Kafka acknowledged them. A crash between the send and the
mark re-sends on the next leader: consumers must treat events idempotently.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg
from aiokafka import AIOKafkaProducer

from fairlane_events.topics import PLACEMENTS

__all__ = ["OutboxRelay"]

log = logging.getLogger("fairlane.scheduler.outbox")

_LEADER_LOCK = 0x4F555458  # "OUTX"
_BATCH = 500
_CHANNEL = "fairlane_outbox"  # NOTIFY'd by every outbox insert


class OutboxRelay:
    def __init__(self, pool: asyncpg.Pool, bootstrap: str, *, idle_poll_s: float = 1.0) -> None:
        self._pool = pool
        self._bootstrap = bootstrap
        self._idle_poll_s = idle_poll_s
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self.published = 0
        self.is_leader = False

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="outbox-relay")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)

    async def _run(self) -> None:
        """Keep trying to lead; a lost connection or broker restarts the attempt."""
        while True:
            try:
                await self._lead()
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - any failure: log, back off, retry
                log.warning("outbox relay restarting after %s: %s", type(exc).__name__, exc)
                self.is_leader = False
                await asyncio.sleep(2.0)

    async def _lead(self) -> None:
        # A pooled connection: cancelling a wait on it is clean, and the pool's reset on
        # release drops the advisory lock if we could not.
        async with self._pool.acquire() as conn:
            # Stand-by replicas wait here, inside Postgres, until the leader's session ends.
            await conn.execute("SELECT pg_advisory_lock($1)", _LEADER_LOCK)
            self.is_leader = True
            await conn.add_listener(_CHANNEL, self._on_notify)
            producer = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap, enable_idempotence=True, acks="all"
            )
            try:
                await producer.start()
                while True:
                    if not await self._relay_batch(conn, producer):
                        self._wake.clear()
                        with contextlib.suppress(TimeoutError):
                            await asyncio.wait_for(self._wake.wait(), self._idle_poll_s)
            finally:
                self.is_leader = False
                await producer.stop()
                if not conn.is_closed():
                    await conn.remove_listener(_CHANNEL, self._on_notify)
                    await conn.execute("SELECT pg_advisory_unlock($1)", _LEADER_LOCK)

    def _on_notify(self, *_: object) -> None:
        self._wake.set()

    async def _relay_batch(self, conn: asyncpg.Connection, producer: AIOKafkaProducer) -> int:
        rows = await conn.fetch(
            """SELECT id, placement_id, payload FROM outbox
               WHERE published_at IS NULL ORDER BY id LIMIT $1""",
            _BATCH,
        )
        if not rows:
            return 0
        sends = [
            await producer.send(
                PLACEMENTS, row["payload"].encode(), key=str(row["placement_id"]).encode()
            )
            for row in rows
        ]
        await asyncio.gather(*sends)
        await conn.execute(
            "UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])",
            [row["id"] for row in rows],
        )
        self.published += len(rows)
        return len(rows)
