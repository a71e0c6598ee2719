"""The scorer bench's steady load and its latency probe, made cheap for a shared machine.

On the 2-core bench machine the broker, this load generator and the worker under test
share the cores; the generator used to build and encode a pydantic record per sample
and await one send (a produce request of its own, ``linger_ms=0``) per record, and its
consumer fetched whatever one byte had arrived: with the broker's work for those small
requests and fetches, that left the worker too little CPU at 80 % of its rate
(docs/benchmarks-history.md, "Scorer"). Now:

- every payload is encoded before the timed phase: a pool of node samples with random
  metrics, each split around its ``ts_ms``, so that a send only splices in the time;
- records due are sent every ``TICK_S`` in one batch per partition (aiokafka's
  ``create_batch``/``send_batch``), stamped with the time they are sent, in the record
  (``ts_ms``) and as its Kafka timestamp;
- the probe's consumer asks the broker to gather up to ``FETCH_WAIT_MS`` of records per
  fetch instead of one fetch per record or two.

The probe reads on after the last record until no score has come for ``QUIET_S``, so a
worker that falls behind has its late scores counted too (the probe used to stop once
it had read the last sample, leaving out the scores still to come: the slowest ones).

What is measured is unchanged: a score's latency is the time from its sample's
``ts_ms`` (the score record's Kafka timestamp) to the probe receiving it, every score
record of the load's nodes counted. The probe's fetch wait can only make a latency
longer (by at most ``FETCH_WAIT_MS``), never shorter.
"""

from __future__ import annotations

import asyncio
import secrets
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.partitioner import DefaultPartitioner

from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.signing import SIGNATURE_HEADER, RingSigner, parse_key_ring
from fairlane_events.topics import NODE_SAMPLES

__all__ = [
    "FETCH_WAIT_MS",
    "KEY_RING",
    "QUIET_S",
    "TICK_S",
    "Payload",
    "latencies",
    "payloads",
    "signed",
]

#: The benchmarks' own key ring (a fresh secret per run): their records are signed as an
#: agent signs them, so the scorer's verification is part of what is measured.
KEY_RING = f"bench-1 {secrets.token_hex(24)}\n"
_SIGNER = RingSigner(parse_key_ring(KEY_RING))


def signed(key: bytes, value: bytes) -> list[tuple[str, bytes]]:
    """The signature header of a node sample keyed by its node ``key``."""
    return [(SIGNATURE_HEADER, _SIGNER.signature(key.decode(), key, value))]


TICK_S = 0.01
FETCH_WAIT_MS = 10
QUIET_S = 2.0  # after the last record is read, how long without a score ends the probe
_PLACEHOLDER_MS = 1_111_111_111_111  # 13 digits, as every ts_ms until the year 2286
_POOL = 5_000  # distinct payloads, a multiple of the load's 500 nodes


@dataclass(frozen=True)
class Payload:
    """One encoded node sample, cut where its ``ts_ms`` goes."""

    key: bytes
    head: bytes
    tail: bytes
    partition: int

    def at(self, ts_ms: int) -> bytes:
        return self.head + str(ts_ms).encode() + self.tail


def payloads(
    make: Callable[[int, int, np.random.Generator], NodeSample],
    count: int,
    nodes: int,
    partitions: int,
    rng: np.random.Generator,
) -> list[Payload]:
    """``min(count, pool)`` payloads, the i-th of node ``i % nodes`` (``make(node,
    ts_ms, rng)`` builds it), each with its partition as the producer's default
    partitioner chooses it from the key."""
    partitioner = DefaultPartitioner()
    all_partitions = list(range(partitions))
    made = []
    for i in range(min(count, _POOL)):
        record = make(i % nodes, _PLACEHOLDER_MS, rng)
        encoded = encode(record)
        mark = f'"ts_ms":{_PLACEHOLDER_MS}'.encode()
        if encoded.count(mark) != 1:
            raise ValueError("the encoded node sample does not hold its ts_ms once")
        head, tail = encoded.split(mark)
        key = record.node.encode()
        partition = partitioner(key, all_partitions, all_partitions)
        made.append(Payload(key, head + b'"ts_ms":', tail, partition))
    return made


async def _send_paced(
    producer: AIOKafkaProducer, pool: list[Payload], rate: float, count: int
) -> None:
    """Send ``count`` records at ``rate`` per second: every tick, the records due since
    the last one, one batch per partition, stamped with the time they go."""
    t0, sent = time.time(), 0
    while sent < count:
        due = min(count, int((time.time() - t0) * rate) + 1)
        if due > sent:
            ts_ms = int(time.time() * 1000)
            batches: dict[int, Any] = {}
            for i in range(sent, due):
                payload = pool[i % len(pool)]
                value = payload.at(ts_ms)
                batch = batches.get(payload.partition)
                if batch is not None and _append(batch, ts_ms, payload.key, value):
                    continue
                if batch is not None:  # full
                    await _submit(producer, batch, payload.partition)
                batch = batches[payload.partition] = producer.create_batch()
                if not _append(batch, ts_ms, payload.key, value):
                    raise ValueError(f"a record of {len(value)} bytes does not fit a batch")
            for partition, batch in batches.items():
                await _submit(producer, batch, partition)
            sent = due
        await asyncio.sleep(TICK_S)


def _append(batch: Any, ts_ms: int, key: bytes, value: bytes) -> bool:
    headers = signed(key, value)
    return batch.append(timestamp=ts_ms, key=key, value=value, headers=headers) is not None


async def _submit(producer: AIOKafkaProducer, batch: Any, partition: int) -> None:
    batch.close()
    await producer.send_batch(batch, NODE_SAMPLES, partition=partition)


async def latencies(
    bootstrap: str,
    starts: dict[TopicPartition, int],
    *,
    prefix: bytes,
    pool: list[Payload],
    rate: float,
    seconds: float,
) -> tuple[list[float], list[float]]:
    """Send ``rate`` records/s for ``seconds`` from ``pool``, reading the topics of
    ``starts`` from there; (score latencies, raw-consumer latencies) in seconds, of the
    records whose key starts with ``prefix``."""
    raw: list[float] = []
    scores: list[float] = []
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap,
        enable_auto_commit=False,
        fetch_max_wait_ms=FETCH_WAIT_MS,
        fetch_min_bytes=1 << 20,
    )
    await consumer.start()
    consumer.assign(list(starts))
    for tp, offset in starts.items():
        consumer.seek(tp, offset)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=0)
    await producer.start()
    n = int(rate * seconds)
    await producer.partitions_for(NODE_SAMPLES)
    sender = asyncio.create_task(_send_paced(producer, pool, rate, n))
    deadline = time.monotonic() + seconds + 30
    try:
        last_score = time.monotonic()
        while time.monotonic() < deadline:
            if len(raw) >= n and time.monotonic() - last_score > QUIET_S:
                break  # every record sent is read, and the scores have stopped coming
            for tp, messages in (await consumer.getmany(timeout_ms=200)).items():
                arrived = time.time()
                into = raw if tp.topic == NODE_SAMPLES else scores
                before = len(into)
                into.extend(
                    arrived - m.timestamp / 1000
                    for m in messages
                    if m.key is not None and m.key.startswith(prefix)
                )
                if into is scores and len(into) > before:
                    last_score = time.monotonic()
        await sender
    finally:
        sender.cancel()
        await producer.stop()
        await consumer.stop()
    return scores, raw
