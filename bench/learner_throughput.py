"""Speed-learner benchmark: job-progress records per second one scorer worker learns,
as a ratio to a raw aiokafka consumer reading the same records in the same run.

Not a test. Needs a Kafka broker (the test one works):

    .venv/bin/python -m bench.learner_throughput --bootstrap 127.0.0.1:29292 \
        [--placements 2000 --ranks 8 --windows 10]

``placements`` live gangs of ``ranks`` GPUs (one node each) are published on
``fairlane.placements.v1`` and a fresh scorer worker, its group started where they
begin, takes them in; then ``windows`` one-minute progress records of each go to
``fairlane.job-progress.v1`` (one rank in eight runs at 0.8 x) as a backlog, which the
worker joins with their placements and learns from. The rate is taken from its
``fairlane_scorer_progress_learned_total`` counter between the first and the last
report, so start-up is excluded, with the worker's CPU seconds over the same span. Then,
the worker stopped, a raw consumer reads the same progress records (no decoding).

The placements go first and are waited for so that the rate is the learner's alone: a
worker that reads a backlog of both topics may meet a record before its placement, and
holds it until the placement comes (docs/design-contract.md), which would time the hold.

The aim (issue 27): a 100k-GPU fleet reporting every 60 s on one worker, i.e. 1,667 rank
reports a second (208 records/s of eight ranks).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import tempfile
import time
from pathlib import Path

import httpx
from aiokafka import AIOKafkaProducer, TopicPartition

from bench.scorer_throughput import (
    commit_at,
    counter_rate,
    end_offsets,
    metric,
    raw_read_s,
    scorer,
)
from fairlane_events.codec import encode
from fairlane_events.records import (
    GpuSlot,
    JobProgress,
    NodeAssignment,
    PlacementEvent,
    RankProgress,
)
from fairlane_events.topics import JOB_PROGRESS, NODE_SAMPLES, PLACEMENTS, STREAM_PARTITIONS
from fairlane_runtime.kafka import ensure_topics

AIM_RANK_REPORTS_S = 100_000 / 60
LEARNED = "fairlane_scorer_progress_learned_total"
PLACED = "fairlane_scorer_placement_events_total"


def _parts(topic: str) -> list[TopicPartition]:
    return [TopicPartition(topic, p) for p in range(STREAM_PARTITIONS)]


def placement(prefix: str, n: int, ranks: int, ts_ms: int) -> PlacementEvent:
    node = f"{prefix}-node-{n}"
    return PlacementEvent(
        schema_="placement/1",
        placement_id=f"{prefix}-p{n}",
        job_id=f"{prefix}-j{n}",
        namespace="bench",
        event="created",
        ts_ms=ts_ms,
        nodes=[
            NodeAssignment(
                node=node,
                node_rank=0,
                gpus=[GpuSlot(uuid=f"{node}-gpu{i}", index=i) for i in range(ranks)],
                cuda_visible_devices=",".join(str(i) for i in range(ranks)),
                master_addr=node,
                master_port=29500,
                world_size=ranks,
            )
        ],
    )


def progress(event: PlacementEvent, window: int, ts_ms: int) -> JobProgress:
    gpus = event.nodes[0].gpus
    times = [0.25 if i % 8 == 7 else 0.2 for i in range(len(gpus))]  # one in eight at 0.8 x
    return JobProgress(
        schema_="job-progress/1",
        placement_id=event.placement_id,
        job_class="compute-bound",
        ts_ms=ts_ms + window * 60_000,
        window_s=60.0,
        steps_per_s=1 / max(times),
        ranks=[
            RankProgress(rank=r, uuid=g.uuid, compute_s_per_step=t, steps=int(60 / t))
            for r, (g, t) in enumerate(zip(gpus, times, strict=True))
        ],
    )


async def produce(bootstrap: str, topic: str, records: list[tuple[bytes, bytes]]) -> None:
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, linger_ms=5, compression_type="gzip")
    await producer.start()
    try:
        for key, value in records:
            await producer.send(topic, value, key=key)
        await producer.flush()
    finally:
        await producer.stop()


async def wait_for(url: str, name: str, count: int, timeout_s: float = 300) -> None:
    deadline = time.monotonic() + timeout_s
    while metric(url, name) < count:
        if time.monotonic() > deadline:
            raise TimeoutError(f"{name}: {metric(url, name)} of {count}")
        await asyncio.sleep(0.2)


def rejected_total(url: str) -> float:
    """Progress records dead-lettered, every reason together (a labelled counter)."""
    lines = httpx.get(f"{url}/metrics", timeout=5).text.splitlines()
    name = "fairlane_scorer_progress_rejected_total{"
    return sum(float(line.split()[1]) for line in lines if line.startswith(name))


async def run(args: argparse.Namespace) -> None:
    prefix = f"lbench-{os.getpid()}"
    t0 = int(time.time() * 1000) - args.windows * 60_000
    events = [placement(prefix, n, args.ranks, t0) for n in range(args.placements)]
    reports = [progress(e, w, t0) for w in range(args.windows) for e in events]
    app_id = f"learner-bench-{os.getpid()}"
    await ensure_topics(args.bootstrap)
    samples = await end_offsets(args.bootstrap, _parts(NODE_SAMPLES))  # none to score
    starts = await end_offsets(args.bootstrap, _parts(PLACEMENTS) + _parts(JOB_PROGRESS))
    await commit_at(args.bootstrap, app_id, {**samples, **starts})
    await produce(
        args.bootstrap, PLACEMENTS, [(e.placement_id.encode(), encode(e)) for e in events]
    )
    with (
        tempfile.TemporaryDirectory() as tmp,
        scorer(args.bootstrap, app_id, args.port, Path(tmp), None) as (url, pid),
    ):
        await wait_for(url, PLACED, len(events))
        await produce(
            args.bootstrap, JOB_PROGRESS, [(r.placement_id.encode(), encode(r)) for r in reports]
        )
        rate, per_cpu_s = await counter_rate(url, pid, LEARNED, len(reports))
        rejected = rejected_total(url)
    progress_starts = {tp: o for tp, o in starts.items() if tp.topic == JOB_PROGRESS}
    raw_rate = len(reports) / await raw_read_s(args.bootstrap, progress_starts, len(reports))
    rank_rate = rate * args.ranks
    print(f"records {len(reports)} ({args.placements} placements x {args.windows} windows), "
          f"{args.ranks} ranks each")  # fmt: skip
    print(f"raw aiokafka consumer: {raw_rate:,.0f} records/s")
    print(
        f"learner (1 worker):    {rate:,.0f} records/s = {rate / raw_rate:.3f} x raw; "
        f"{rank_rate:,.0f} rank reports/s = {rank_rate / AIM_RANK_REPORTS_S:.1f} x the aim "
        f"(100k GPUs every 60 s)"
    )
    print(f"learner per CPU-second: {per_cpu_s:,.0f} records ({1e6 / per_cpu_s:.0f} us each)")
    print(f"rejected: {rejected:.0f} (expected 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--placements", type=int, default=2000)
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--windows", type=int, default=10)
    parser.add_argument("--port", type=int, default=26066)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
