"""What was lost or duplicated, counted from the systems of record: the topics, Postgres
and the services' own /metrics, never from what the services say about themselves alone."""

from __future__ import annotations

import collections
import json
import time
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass

import asyncpg
import httpx
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition
from prometheus_client.parser import text_string_to_metric_families

from fairlane_events.codec import DecodeError, decode
from fairlane_events.records import NodeSample, PlacementEvent
from fairlane_events.topics import NODE_SAMPLES, PLACEMENTS
from fairlane_runtime.kafka import kafka_admin, topic_partitions
from tests.chaos.load import Ledger

__all__ = [
    "PlacementAudit",
    "SampleAudit",
    "audit_placements",
    "audit_samples",
    "end_offsets",
    "read_topic",
    "scrape",
    "wait_until",
]


def scrape(url: str) -> dict[str, float]:
    """One scrape of the metrics page at ``url``: ``name{labels}`` -> value."""
    text = httpx.get(url, timeout=5, follow_redirects=True).text
    out: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(s.labels.items()))
            out[f"{s.name}{{{labels}}}" if labels else s.name] = s.value
    return out


def wait_until(check: Callable[[], bool], timeout_s: float, poll_s: float = 1.0) -> float | None:
    """Seconds until ``check()`` held, or ``None`` if it did not within ``timeout_s``.
    Exceptions count as "not yet" (a service still restarting)."""
    start = time.monotonic()
    while time.monotonic() - start < timeout_s:
        try:
            if check():
                return time.monotonic() - start
        except (httpx.HTTPError, OSError):
            pass
        time.sleep(poll_s)
    return None


async def _partitions(bootstrap: str, topic: str) -> list[TopicPartition]:
    admin = await kafka_admin(bootstrap)
    try:
        count = (await topic_partitions(admin, [topic]))[topic]
    finally:
        await admin.close()
    return [TopicPartition(topic, p) for p in range(count)]


async def end_offsets(bootstrap: str, topic: str) -> dict[int, int]:
    """Where each partition of ``topic`` ends now: a mark to read what comes after."""
    parts = await _partitions(bootstrap, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        return {tp.partition: offset for tp, offset in (await consumer.end_offsets(parts)).items()}
    finally:
        await consumer.stop()


async def read_topic(
    bootstrap: str, topic: str, since: Mapping[int, int] | None = None
) -> list[ConsumerRecord[bytes, bytes]]:
    """Every record of ``topic`` from its beginning (or from the offsets ``since``, by
    partition: what came after an :func:`end_offsets`) up to its end offsets now."""
    parts = await _partitions(bootstrap, topic)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, group_id=None)
    await consumer.start()
    try:
        consumer.assign(parts)
        await consumer.seek_to_beginning(*parts)
        for tp in parts:
            if since is not None and tp.partition in since:
                consumer.seek(tp, since[tp.partition])
        end = await consumer.end_offsets(parts)
        records: list[ConsumerRecord[bytes, bytes]] = []
        while [tp for tp in parts if await consumer.position(tp) < end[tp]]:
            for batch in (await consumer.getmany(timeout_ms=1000)).values():
                records += batch
        return records
    finally:
        await consumer.stop()


@dataclass(frozen=True)
class SampleAudit:
    #: What Kafka acknowledged to the agent (scraped before the topic was read). Not what
    #: it read: a sample read and not yet sent is no loss; one never sent keeps the agent
    #: from draining, which is "no recovery".
    read: int
    on_topic: int  # distinct (node, ts_ms) records of its nodes on the topic
    duplicates: int
    out_of_order: int  # nodes whose records are not in ts_ms order

    @property
    def lost(self) -> int:
        return max(0, self.read - self.on_topic)


async def audit_samples(
    bootstrap: str, agent_url: str, prefix: str, skip: Collection[tuple[int, int]] = ()
) -> SampleAudit:
    """The agent's samples on the topic. ``skip``: the (partition, offset) of records a
    scenario wrote under the fleet's names (a replayed sample), which are not the agent's."""
    read = int(scrape(f"{agent_url}/metrics")["fairlane_agent_samples_published_total"])
    per_node: dict[str, list[int]] = collections.defaultdict(list)
    for record in await read_topic(bootstrap, NODE_SAMPLES):
        if (record.partition, record.offset) in skip:
            continue
        if record.key is not None and record.key.decode(errors="replace").startswith(prefix):
            sample = decode(NodeSample, record.value)
            per_node[sample.node].append(sample.ts_ms)
    total = sum(len(v) for v in per_node.values())
    distinct = sum(len(set(v)) for v in per_node.values())
    disorder = sum(1 for v in per_node.values() if v != sorted(v))
    return SampleAudit(read, distinct, total - distinct, disorder)


@dataclass(frozen=True)
class PlacementAudit:
    answered: int
    missing: int  # answered placed, absent from Postgres (a lost placement)
    wrong_size: int  # live placement whose live allocations are not what was asked (partial)
    #: GPUs whose live allocations pass a whole GPU (1000 thousandths: a whole one and a
    #: tenant, or shares above 1) or its memory; several shares of one GPU are no fault.
    gpu_overcommitted: int
    release_lost: int  # answered released, still live
    outbox_unpublished: int
    events_lost: int  # outbox events absent from the placements topic
    events_duplicated: int  # at least once: consumers dedupe by (placement, event)
    #: Each lost event: the outbox row and what the topic holds under its placement's key.
    lost_events: tuple[str, ...] = ()

    @property
    def ok(self) -> bool:
        bad = self.missing + self.wrong_size + self.gpu_overcommitted + self.release_lost
        return bad + self.outbox_unpublished + self.events_lost == 0


async def outbox_unpublished(database_url: str) -> int:
    conn = await asyncpg.connect(database_url)
    try:
        n: int = await conn.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        return n
    finally:
        await conn.close()


async def audit_placements(bootstrap: str, database_url: str, ledger: Ledger) -> PlacementAudit:
    with ledger.lock:
        placed, released = dict(ledger.placed), set(ledger.released)
    conn = await asyncpg.connect(database_url)
    try:
        rows = await conn.fetch("SELECT id::text, job_id, state FROM placements")
        live = await conn.fetch(
            "SELECT p.id::text, count(a.gpu_uuid) AS gpus FROM placements p "
            "LEFT JOIN allocations a ON a.placement_id = p.id AND a.live "
            "WHERE p.state = 'placed' GROUP BY p.id"
        )
        overcommitted = await conn.fetchval(
            "SELECT count(*) FROM (SELECT gpu_uuid FROM allocations WHERE live "
            "GROUP BY gpu_uuid HAVING sum(share_milli) > 1000 "
            "OR sum(memory_mib) > min(gpu_memory_mib)) t"
        )
        unpublished = await conn.fetchval("SELECT count(*) FROM outbox WHERE published_at IS NULL")
        outbox = await conn.fetch(
            "SELECT id, placement_id::text, payload, published_at FROM outbox ORDER BY id"
        )
    finally:
        await conn.close()
    state = {r["id"]: (r["job_id"], r["state"]) for r in rows}
    missing = sum(1 for pid, (job, _) in placed.items() if state.get(pid, ("",))[0] != job)
    asked = {pid: gpus for pid, (_, gpus) in placed.items()}
    wrong = sum(1 for r in live if r["id"] in asked and r["gpus"] != asked[r["id"]])
    wrong += sum(1 for r in live if r["gpus"] == 0)
    release_lost = sum(1 for pid in released if state.get(pid, ("", ""))[1] == "placed")
    # Only rows already published: Kafka acknowledged them before they were marked, so the
    # topic (read after this) holds them; a row the relay has yet to send is no loss.
    outbox = [r for r in outbox if r["published_at"] is not None]
    want = collections.Counter((r["placement_id"], _event_of(r["payload"])) for r in outbox)
    got: collections.Counter[tuple[str, str]] = collections.Counter()
    by_key: dict[bytes, list[str]] = collections.defaultdict(list)  # what each key holds
    for record in await read_topic(bootstrap, PLACEMENTS):
        try:
            event = decode(PlacementEvent, record.value)
        except DecodeError as exc:
            # Hostile records on the topic are not the outbox's; kept to explain a loss.
            what = f"undecodable ({str(exc).splitlines()[0][:160]})"
        else:
            got[(event.placement_id, event.event)] += 1
            what = f"{event.placement_id} {event.event}"
        by_key[record.key or b""].append(f"{record.partition}@{record.offset}: {what}")
    lost = sum(max(0, n - got[k]) for k, n in want.items())
    dup = sum(max(0, got[k] - n) for k, n in want.items())
    lost_events = tuple(
        _describe_loss(r, by_key[r["placement_id"].encode()])
        for r in outbox
        if got[(r["placement_id"], _event_of(r["payload"]))]
        < want[(r["placement_id"], _event_of(r["payload"]))]
    )
    return PlacementAudit(
        len(placed),
        missing,
        wrong,
        overcommitted,
        release_lost,
        unpublished,
        lost,
        dup,
        lost_events,
    )


def _describe_loss(row: asyncpg.Record, on_topic: list[str]) -> str:
    """One lost event: its outbox row, and the records under its key on the topic."""
    return (
        f"outbox row {row['id']} (placement {row['placement_id']}, published "
        f"{row['published_at'].isoformat()}): "
        f"{row['payload']}; under its key on the topic: {on_topic or 'nothing'}"
    )


def _event_of(payload: str | dict[str, object]) -> str:
    data = json.loads(payload) if isinstance(payload, str) else payload
    return str(data["event"])
