"""Scorer benchmark: how long a worker takes to rebuild a fleet's state from the
``node-windows`` changelog, as the difference to a worker starting on an empty one,
measured in the same run. Not a test; needs a Kafka broker:

    .venv/bin/python -m bench.scorer_rebuild --bootstrap 127.0.0.1:29296 [--gpus 10000]

The changelog is filled with full windows (8 GPUs a node, 121 samples 5 s apart: the
10-minute window of a 100,000-GPU fleet's steady state), one row per node. Each worker is
then started and timed until the score of a probe sample (a node of the fleet, just after
its window) is on the scores topic: agents wait for recovery, so this is start-up plus
rebuild. The probe's ``samples_in_window`` shows the recovered window was used.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import numpy as np
import orjson
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.partitioner import DefaultPartitioner

from bench.scorer_load import signed
from bench.scorer_throughput import SCORE_PARTS, end_offsets, node_sample, scorer
from fairlane_events.codec import decode, encode
from fairlane_events.records import GpuScore
from fairlane_events.topics import ALL_TOPICS, NODE_SAMPLES, STREAM_PARTITIONS
from fairlane_runtime.kafka import ensure_topics
from fairlane_scorer.app import WINDOWS_TABLE, scorer_topics
from fairlane_scorer.core.node_rows import encode_node
from fairlane_scorer.core.step import score_batch
from fairlane_scoring.config import ScoreConfig

GPUS_PER_NODE = 8
ROUNDS, INTERVAL_MS = 121, 5_000


def full_rows(prefix: str, nodes: int, t0: int) -> list[tuple[str, bytes]]:
    """(node, encoded row) of ``nodes`` nodes with full windows: one node scored for
    real, then relabelled (the row's size and shape are what the rebuild costs)."""
    rng = np.random.default_rng(0)
    config = ScoreConfig(interval_s=INTERVAL_MS / 1000)
    samples = [
        node_sample("tmpl", 0, t0 + r * INTERVAL_MS, GPUS_PER_NODE, rng) for r in range(ROUNDS)
    ]
    template = score_batch(samples, {}, {}, config).rows["tmpl-0"]
    rows = []
    for n in range(nodes):
        node = f"{prefix}-{n}"
        windows = {f"{node}-{w.index}": replace(w, node=node) for w in template.values()}
        rows.append((node, encode_node(windows)))
    return rows


async def fill_changelog(bootstrap: str, app_id: str, rows: list[tuple[str, bytes]]) -> None:
    await ensure_topics(bootstrap, [*ALL_TOPICS, *scorer_topics(app_id)])
    topic = f"{app_id}-{WINDOWS_TABLE}-changelog"
    partitioner = DefaultPartitioner()
    parts = list(range(STREAM_PARTITIONS))
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=20, max_request_size=2**20)
    await producer.start()
    try:
        for node, row in rows:
            # The row's partition is its node's samples partition (the table is
            # co-partitioned); its key is the table's JSON key.
            partition = partitioner(node.encode(), parts, parts)
            await producer.send(topic, row, key=orjson.dumps(node), partition=partition)
        await producer.flush()
    finally:
        await producer.stop()


async def time_to_first_score(
    bootstrap: str, app_id: str, node: str, ts_ms: int, *, tmp: Path, port: int
) -> tuple[float, int]:
    """Seconds from the worker's start to the probe's score; its samples_in_window."""
    start = await end_offsets(bootstrap, SCORE_PARTS)
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    consumer.assign(list(start))
    for tp, offset in start.items():
        consumer.seek(tp, offset)
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap)
    await producer.start()
    prefix, number = node.rsplit("-", 1)
    probe = node_sample(prefix, int(number), ts_ms, GPUS_PER_NODE, np.random.default_rng(1))
    try:
        t0 = time.perf_counter()
        with scorer(bootstrap, app_id, port, tmp, None):
            key, value = node.encode(), encode(probe)
            await producer.send_and_wait(NODE_SAMPLES, value, key=key, headers=signed(key, value))
            while True:
                for messages in (await consumer.getmany(timeout_ms=200)).values():
                    for m in messages:
                        score = decode(GpuScore, m.value)
                        if score.node == node and score.ts_ms == ts_ms:  # not a stale scan's
                            return time.perf_counter() - t0, score.samples_in_window
                if time.perf_counter() - t0 > 600:
                    raise TimeoutError("no probe score after 600 s")
    finally:
        await producer.stop()
        await consumer.stop()


async def run(args: argparse.Namespace) -> None:
    nodes = args.gpus // GPUS_PER_NODE
    prefix = f"rebuild-{os.getpid()}"
    t0 = int(time.time() * 1000) - ROUNDS * INTERVAL_MS
    rows = full_rows(prefix, nodes, t0)
    full_app, empty_app = f"scorer-rebuild-{os.getpid()}", f"scorer-empty-{os.getpid()}"
    await fill_changelog(args.bootstrap, full_app, rows)
    await ensure_topics(args.bootstrap, [*ALL_TOPICS, *scorer_topics(empty_app)])
    probe_ts = t0 + ROUNDS * INTERVAL_MS
    with tempfile.TemporaryDirectory() as tmp:
        for sub in ("e", "f"):
            (Path(tmp) / sub).mkdir()
        empty_s, empty_n = await time_to_first_score(
            args.bootstrap, empty_app, f"{prefix}-0", probe_ts, tmp=Path(tmp) / "e", port=args.port
        )
        full_s, full_n = await time_to_first_score(
            args.bootstrap, full_app, f"{prefix}-0", probe_ts, tmp=Path(tmp) / "f", port=args.port
        )
    mib = sum(len(r) for _, r in rows) / 2**20
    print(f"changelog: {nodes} node rows, {nodes * GPUS_PER_NODE} GPUs, {mib:.1f} MiB")
    print(f"empty changelog: first score after {empty_s:.1f} s (samples_in_window {empty_n})")
    print(f"full changelog:  first score after {full_s:.1f} s (samples_in_window {full_n})")
    print(f"rebuild of {nodes * GPUS_PER_NODE} GPUs: {full_s - empty_s:.1f} s beyond start-up")


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    )
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--port", type=int, default=6099, help="the workers' web port")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
