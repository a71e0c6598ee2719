"""Scorer benchmark: GPU-samples/s one worker sustains and produce->score latency, each
as a ratio to a raw aiokafka consumer reading the same records in the same run.

Not a test. Needs a Kafka broker (the test one works):

    .venv/bin/python -m bench.scorer_throughput --bootstrap 127.0.0.1:29292 \
        [--nodes 1250 --rounds 4 --gpus 8] [--latency-rate 100 | --latency-of-max 0.8]
        [--latency-s 20] [--profile]

1. Throughput: nodes x rounds records (gpus GPUs each) are produced first; a raw consumer
   reads them (no decoding) and then a fresh scorer worker (its consumer group committed
   at the topic's end beforehand) scores them; the rate is taken from its /metrics
   counter between the first and the last scored sample, so start-up is excluded, with
   the scorer process's CPU seconds over the same span (GPU-samples per CPU-second: what
   a shared machine's other load changes least) and the mean records per batch.
2. Latency: the same scorer, then records at a fixed rate (``--latency-rate``, or
   ``--latency-of-max``: that share of the rate step 1 measured in this run, since the
   machine's speed varies between runs by more than the margin below the maximum); the
   p50/p99 from a record's ``ts_ms`` (the time it is sent) to its score records, and to
   the raw consumer seeing the record. The load is pre-encoded and sent in batches
   (bench/scorer_load.py), so that it takes little of the cores it shares.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import pstats
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition

from bench.scorer_load import KEY_RING, latencies, payloads, signed
from fairlane_events.codec import encode
from fairlane_events.records import GpuSample, NodeSample
from fairlane_events.topics import GPU_SCORES, NODE_SAMPLES, STREAM_PARTITIONS
from fairlane_runtime.kafka import ensure_topics

SAMPLE_PARTS = [TopicPartition(NODE_SAMPLES, p) for p in range(STREAM_PARTITIONS)]
SCORE_PARTS = [TopicPartition(GPU_SCORES, p) for p in range(STREAM_PARTITIONS)]
TARGET_GPU_SAMPLES_S = 20_000
LOAD_NODES = 500  # the steady load's nodes


def node_sample(
    prefix: str, node: int, ts_ms: int, gpus: int, rng: np.random.Generator
) -> NodeSample:
    util = rng.uniform(0, 100, gpus)
    return NodeSample(
        schema_="node-sample/1",
        node=f"{prefix}-{node}",
        ts_ms=ts_ms,
        source="sim",
        gpus=[
            GpuSample(
                uuid=f"{prefix}-{node}-{i}",
                index=i,
                model="NVIDIA H100 80GB HBM3",
                gpu_util_pct=float(util[i]),
                mem_util_pct=float(util[i]) / 2,
                mem_used_bytes=int(util[i] * 2**30 / 2),
                mem_total_bytes=80 * 2**30,
                sm_active=float(util[i]) / 100,
                temp_c=55.0,
                slowdown_temp_c=90.0,
                power_w=100 + 5 * float(util[i]),
                power_limit_w=700.0,
                sm_clock_mhz=1980.0,
                max_sm_clock_mhz=1980.0,
                clock_event_reasons=0,
                ecc_uncorrected_volatile=0,
                remapped_rows_pending=False,
            )
            for i in range(gpus)
        ],
    )


async def end_offsets(bootstrap: str, parts: list[TopicPartition]) -> dict[TopicPartition, int]:
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap)
    await consumer.start()
    try:
        return dict(await consumer.end_offsets(parts))
    finally:
        await consumer.stop()


async def commit_at(bootstrap: str, group: str, offsets: dict[TopicPartition, int]) -> None:
    """Start ``group`` at these offsets instead of the topic's (test-filled) beginning."""
    consumer = AIOKafkaConsumer(
        bootstrap_servers=bootstrap, group_id=group, enable_auto_commit=False
    )
    await consumer.start()
    try:
        consumer.assign(list(offsets))
        await consumer.commit(offsets)
    finally:
        await consumer.stop()


async def produce(bootstrap: str, records: list[NodeSample]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, compression_type="gzip")
    await producer.start()
    try:
        for r in records:
            key, value = r.node.encode(), encode(r)
            await producer.send(NODE_SAMPLES, value, key=key, headers=signed(key, value))
        await producer.flush()
    finally:
        await producer.stop()


async def raw_read_s(bootstrap: str, start: dict[TopicPartition, int], count: int) -> float:
    """Seconds a raw aiokafka consumer takes to read ``count`` records from ``start``."""
    consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, enable_auto_commit=False)
    await consumer.start()
    try:
        consumer.assign(list(start))
        for tp, offset in start.items():
            consumer.seek(tp, offset)
        seen, t0 = 0, time.perf_counter()
        while seen < count:
            for messages in (await consumer.getmany(timeout_ms=1000, max_records=5000)).values():
                seen += len(messages)
        return time.perf_counter() - t0
    finally:
        await consumer.stop()


def cpu_s(pid: int) -> float:
    """CPU seconds (user + system, all threads) process ``pid`` has used (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


@contextlib.contextmanager
def scorer(
    bootstrap: str, app_id: str, port: int, tmp: Path, profile: Path | None
) -> Iterator[tuple[str, int]]:
    (tmp / "key-ring").write_text(KEY_RING)
    env = {
        **os.environ,
        "FAIRLANE_SAMPLE_KEY_RING_FILE": str(tmp / "key-ring"),
        "KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "FAIRLANE_APP_ID": app_id,
        "FAIRLANE_WEB_PORT": str(port),
        "FAIRLANE_DATA_DIR": str(tmp / "data"),
        "FAIRLANE_LOG_LEVEL": "warning",
    }
    prefix = [sys.executable] + (["-m", "cProfile", "-o", str(profile)] if profile else [])
    with (tmp / "scorer.log").open("wb") as log:
        proc = subprocess.Popen([*prefix, "-m", "fairlane_scorer"], env=env, stdout=log, stderr=log)
        try:
            yield f"http://127.0.0.1:{port}", proc.pid
        finally:
            proc.terminate()
            proc.wait(timeout=60)


def metric(url: str, name: str) -> float:
    with contextlib.suppress(httpx.HTTPError):
        for line in httpx.get(f"{url}/metrics", timeout=5).text.splitlines():
            if line.startswith(f"{name} "):
                return float(line.split()[1])
    return 0.0


def batch_totals(url: str) -> tuple[float, float]:
    """Records in all batches so far, and how many batches."""
    name = "fairlane_scorer_batch_records"
    return metric(url, f"{name}_sum"), metric(url, f"{name}_count")


async def counter_rate(
    url: str, pid: int, name: str, total: int, timeout_s: float = 900
) -> tuple[float, float]:
    """Counter ``name``'s increase per second between its first non-zero reading and
    ``total``, and per CPU-second of process ``pid`` over the same span (what a shared
    machine's other load changes least)."""
    deadline = time.monotonic() + timeout_s
    first: tuple[float, float, float] | None = None
    while time.monotonic() < deadline:
        n, now, cpu = metric(url, name), time.perf_counter(), cpu_s(pid)
        if n > 0 and first is None:
            first = (now, n, cpu)
        if n >= total and first is not None:
            done = n - first[1]
            if done <= 0:  # all of it between two readings: nothing to time
                raise SystemExit(f"{name}: too few to time; give the bench more records")
            return done / max(now - first[0], 1e-9), done / max(cpu - first[2], 1e-9)
        await asyncio.sleep(0.2)
    raise TimeoutError(f"{name}: {metric(url, name)} of {total}")


def print_profile(path: Path) -> None:
    stats = pstats.Stats(str(path))
    stats.sort_stats("tottime").print_stats(15)
    stats.sort_stats("cumulative").print_stats("fairlane_scorer", 15)  # the worker's own


async def run(args: argparse.Namespace) -> None:
    prefix = f"bench-{os.getpid()}"
    rng = np.random.default_rng(0)
    t0 = int(time.time() * 1000)
    records = [
        node_sample(prefix, n, t0 + r * 5_000, args.gpus, rng)
        for r in range(args.rounds)
        for n in range(args.nodes)
    ]
    gpu_samples = len(records) * args.gpus
    app_id = f"scorer-bench-{os.getpid()}"
    await ensure_topics(args.bootstrap)  # a fresh broker has none, and these need 8 partitions
    start = await end_offsets(args.bootstrap, SAMPLE_PARTS)
    await commit_at(args.bootstrap, app_id, start)
    await produce(args.bootstrap, records)
    raw_s = await raw_read_s(args.bootstrap, start, len(records))
    raw_rate = gpu_samples / raw_s
    lat_prefix = f"{prefix}-lat"
    pool = payloads(  # encoded before anything is timed (bench/scorer_load.py)
        lambda node, ts_ms, rng: node_sample(lat_prefix, node, ts_ms, args.gpus, rng),
        count=1 << 30,
        nodes=LOAD_NODES,
        partitions=STREAM_PARTITIONS,
        rng=np.random.default_rng(1),
    )
    with tempfile.TemporaryDirectory() as tmp:
        profile = Path(tmp) / "scorer.prof" if args.profile else None
        with scorer(args.bootstrap, app_id, args.port, Path(tmp), profile) as (url, pid):
            scored = "fairlane_scorer_gpu_samples_scored_total"
            rate, per_cpu_s = await counter_rate(url, pid, scored, gpu_samples)
            backlog = batch_totals(url)
            if args.latency_of_max is not None:
                args.latency_rate = round(args.latency_of_max * rate / args.gpus)
            starts = await end_offsets(args.bootstrap, SAMPLE_PARTS + SCORE_PARTS)
            steady_from, own_cpu, worker_cpu = time.monotonic(), time.process_time(), cpu_s(pid)
            scores, raw = await latencies(
                args.bootstrap,
                starts,
                prefix=lat_prefix.encode(),
                pool=pool,
                rate=args.latency_rate,
                seconds=args.latency_s,
            )
            steady_to, own_cpu = time.monotonic(), time.process_time() - own_cpu
            worker_cpu = cpu_s(pid) - worker_cpu
            steady = [b - a for a, b in zip(backlog, batch_totals(url), strict=True)]
        print(f"records {len(records)} x {args.gpus} GPUs = {gpu_samples} GPU-samples")
        print(f"raw aiokafka consumer: {raw_rate:,.0f} GPU-samples/s")
        print(
            f"scorer (1 worker):     {rate:,.0f} GPU-samples/s = {rate / raw_rate:.3f} x raw, "
            f"{rate / TARGET_GPU_SAMPLES_S:.2f} x the 20,000/s target"
        )
        print(
            f"scorer per CPU-second: {per_cpu_s:,.0f} GPU-samples "
            f"({1e6 / per_cpu_s:.1f} us of the worker's CPU per GPU-sample)"
        )
        print(f"steady flow: monotonic {steady_from:.1f} to {steady_to:.1f} (bench.cpu_share)")
        sent = len(raw) or 1
        print(
            f"worker in the steady flow: {worker_cpu:.2f} CPU-s, "
            f"{1e6 * worker_cpu / (sent * args.gpus):.1f} us per GPU-sample sent"
        )
        print(
            f"load generator and probe (this process): {own_cpu:.2f} CPU-s in the steady flow, "
            f"{1e6 * own_cpu / sent:.0f} us per record sent, {len(scores) / sent:.1f} scores each"
        )
        for phase, (n, batches) in (("backlog", backlog), ("steady flow", steady)):
            print(f"records per batch, {phase}: {n / max(batches, 1):.1f} (mean)")
        for name, values in (("score", scores), ("raw", raw)):
            p50, p99 = np.percentile(values, [50, 99]) * 1000 if values else (float("nan"),) * 2
            at = f"at {args.latency_rate:g} records/s"
            print(f"{name:5s} latency {at}: p50 {p50:.1f} ms, p99 {p99:.1f} ms (n={len(values)})")
        if scores and raw:
            s50, s99 = np.percentile(scores, [50, 99])
            r50, r99 = np.percentile(raw, [50, 99])
            print(f"latency ratio score/raw: p50 {s50 / r50:.1f} x, p99 {s99 / r99:.1f} x")
        if profile is not None and profile.exists():
            print_profile(profile)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--bootstrap", default=os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:19092")
    )
    parser.add_argument("--nodes", type=int, default=1250)
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--gpus", type=int, default=8)
    load = parser.add_mutually_exclusive_group()
    load.add_argument("--latency-rate", type=float, default=100.0, help="records/s")
    load.add_argument(
        "--latency-of-max",
        type=float,
        metavar="SHARE",
        help="records/s: this share of the rate measured in the same run (0.8: 80 %%)",
    )
    parser.add_argument("--latency-s", type=float, default=20.0)
    parser.add_argument("--port", type=int, default=0, help="scorer web port (0: a free one)")
    parser.add_argument("--profile", action="store_true", help="run the scorer under cProfile")
    args = parser.parse_args()
    if args.port == 0:
        import socket

        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            args.port = s.getsockname()[1]
    asyncio.run(run(args))


if __name__ == "__main__":
    main()
