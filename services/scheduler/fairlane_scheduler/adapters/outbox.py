"""The outbox relay: publishes committed placement events to ``fairlane.placements.v1``.

At least once and in order per placement: one replica at a time holds the relay's
advisory lock (the others stand by), reads unpublished rows in id order, sends them
keyed by placement id (one partition per placement, idempotent producer; a record
batch per partition for each read), and marks them published only after Kafka
acknowledged them. A crash between the send and the mark re-sends on the next leader:
consumers must treat events idempotently.

Writers do not NOTIFY, which would serialise their commits (migration 0007 says why):
the relay polls. A read that found a full batch reads again at once; a shorter one
waits ``poll_s`` first, under load too, so that an event waits about ``poll_s`` at
most and the relay costs a few reads, marks and produce requests a second whatever the
placement rate (reading again at once cost one of each per few placements: a tenth of
the process's time in the placement benchmark, docs/benchmarks-history.md).

While Postgres or Kafka is away the relay retries every ``retry_s`` and says so twice
per dependency (gone, back: :class:`~fairlane_runtime.outage.OutageLog`), counting each
failed attempt; only an unexpected error is logged with its traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging

import asyncpg
from aiokafka import AIOKafkaProducer
from aiokafka.errors import KafkaError
from aiokafka.producer.message_accumulator import BatchBuilder

from fairlane_events.topics import PLACEMENTS
from fairlane_runtime.background import BackgroundLoop
from fairlane_runtime.kafka_security import PLAINTEXT, KafkaSecurity
from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.adapters.kafka_partitions import key_partitions
from fairlane_scheduler.adapters.pg_pool import POSTGRES_UNAVAILABLE, keeps_session_state

__all__ = ["OutboxRelay"]

log = logging.getLogger("fairlane.scheduler.outbox")

_LEADER_LOCK = 0x4F555458  # "OUTX"
_BATCH = 1000
# The relay holds one connection for as long as it leads; when Postgres goes away the
# pool takes it back, and using it then raises InterfaceError ("released back to the
# pool"): for this long-held connection, that is the outage too.
_POSTGRES_GONE = (*POSTGRES_UNAVAILABLE, asyncpg.InterfaceError)


class OutboxRelay(BackgroundLoop):
    def __init__(
        self,
        pool: asyncpg.Pool,
        bootstrap: str,
        *,
        postgres_outage: OutageLog,
        kafka_outage: OutageLog,
        security: KafkaSecurity = PLAINTEXT,
        poll_s: float = 0.2,
        retry_s: float = 2.0,
        batch: int = _BATCH,
    ) -> None:
        super().__init__("outbox-relay")
        self._pool = pool
        self._bootstrap = bootstrap
        self._security = security
        self._postgres = postgres_outage
        self._kafka = kafka_outage
        self._poll_s = poll_s
        self._retry_s = retry_s
        self._batch = batch
        self.published = 0
        self.reads = 0  # outbox reads while leading
        self.is_leader = False

    async def run(self) -> None:
        """Keep trying to lead; a lost connection or broker restarts the attempt."""
        while True:
            try:
                await self._lead()
            except asyncio.CancelledError:
                raise
            except KafkaError as exc:
                self._kafka.failed(exc)
            except _POSTGRES_GONE as exc:
                self._postgres.failed(exc)
            except Exception:
                log.exception("outbox relay failed unexpectedly; restarting")
            self.is_leader = False
            await asyncio.sleep(self._retry_s)

    async def _lead(self) -> None:
        # A pooled connection: cancelling a wait on it is clean, and the pool's reset on
        # release (asked for here: the pool skips it otherwise) drops the advisory lock
        # if we could not.
        async with self._pool.acquire() as conn:
            await conn.execute("SELECT 1")  # Postgres answers (a stand-by may wait long below)
            keeps_session_state(conn)
            self._postgres.succeeded()
            # Stand-by replicas wait here, inside Postgres, until the leader's session ends.
            await conn.execute("SELECT pg_advisory_lock($1)", _LEADER_LOCK)
            self.is_leader = True
            producer = AIOKafkaProducer(
                bootstrap_servers=self._bootstrap,
                enable_idempotence=True,
                acks="all",
                **self._security.aiokafka_kwargs(),
            )
            try:
                await producer.start()
                self._kafka.succeeded()
                while True:
                    if await self._relay_batch(conn, producer) < self._batch:
                        await asyncio.sleep(self._poll_s)
            finally:
                self.is_leader = False
                await producer.stop()
                # Best effort: on a lost connection the server already dropped the lock.
                with contextlib.suppress(*_POSTGRES_GONE):
                    if not conn.is_closed():
                        await conn.execute("SELECT pg_advisory_unlock($1)", _LEADER_LOCK)

    async def _relay_batch(self, conn: asyncpg.Connection, producer: AIOKafkaProducer) -> int:
        rows = await conn.fetch(
            """SELECT id, placement_id, payload FROM outbox
               WHERE published_at IS NULL ORDER BY id LIMIT $1""",
            self._batch,
        )
        self.reads += 1
        if not rows:
            return 0
        await asyncio.gather(*await _send_by_partition(producer, rows))
        await conn.execute(
            "UPDATE outbox SET published_at = now() WHERE id = ANY($1::bigint[])",
            [row["id"] for row in rows],
        )
        self.published += len(rows)
        return len(rows)


async def _send_by_partition(
    producer: AIOKafkaProducer, rows: list[asyncpg.Record]
) -> list[asyncio.Future[object]]:
    """Send ``rows`` as one record batch per partition (or more, when one fills), in
    order, each keyed by its placement id on the partition the producer's default
    partitioner gives that key; the futures of Kafka's acknowledgements. Per record, a
    batch append costs a fraction of what ``producer.send`` does (its own future,
    metadata wait and accumulator entry)."""
    partitions = sorted(await producer.partitions_for(PLACEMENTS))
    open_batches: dict[int, BatchBuilder] = {}
    sent: list[asyncio.Future[object]] = []
    keys = [str(row["placement_id"]).encode() for row in rows]
    for row, key, partition in zip(rows, keys, key_partitions(keys, partitions), strict=True):
        value = row["payload"].encode()
        batch = open_batches.get(partition)
        if batch is None or batch.append(key=key, value=value, timestamp=None) is None:
            if batch is not None:  # full: on its way, and a new one for this record
                sent.append(await producer.send_batch(batch, PLACEMENTS, partition=partition))
            batch = open_batches[partition] = producer.create_batch()
            batch.append(key=key, value=value, timestamp=None)  # a fresh one takes any
    for partition, batch in open_batches.items():
        sent.append(await producer.send_batch(batch, PLACEMENTS, partition=partition))
    return sent
