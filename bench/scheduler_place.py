"""Scheduler benchmark (not a test).

1. Placements per second and POST latency (p50/p99), each placement followed by its
   release, with durable commits, at fleets of 1k, 10k and 100k GPUs; as a ratio to the
   commit rate pgbench measures on the same Postgres in the same run.
2. Extender filter + prioritize latency (p99) for 5,000 candidate nodes.
3. Scheduler RSS with the largest fleet loaded.
4. Item 1 once more with a new fleet of the largest size, 90 % of its nodes held by
   another replica's live placements, whose rows each snapshot of the committed rows
   reads every second (the earlier sizes' fleets stay in the view, free).

``--share 0.25``: every job asks for that share of one GPU instead of 1-4 whole GPUs
(issue 29's fractional path: the packing rule and the database's per-GPU share sums).

The scheduler runs in this process (its real lifespan: scores follower, pool, relay,
housekeeping) behind httpx's ASGI transport, so HTTP parsing is in and sockets are out,
on uvloop as the scheduler serves (``--client transport``: the same transport without
``httpx.AsyncClient`` in front, a lighter harness for both the trivial endpoint and the
scheduler). The real-HTTP part then runs it as its own processes.
Run it against a broker and a durable Postgres of its own (see docs/benchmarks.md).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import cProfile
import gc
import logging
import os
import re
import subprocess
import time
import uuid
from pathlib import Path
from urllib.parse import urlparse

import asyncpg
import httpx
import numpy as np
import uvloop
from aiokafka import AIOKafkaProducer

from bench.place_load import in_process_client, load, percentile
from bench.scheduler_http import run_replicas, trivial_http
from bench.trivial_app import trivial_app
from fairlane_events.codec import encode
from fairlane_events.records import GpuScore
from fairlane_events.topics import GPU_SCORES
from fairlane_runtime.kafka import ensure_topics
from fairlane_scheduler.adapters.migrations import apply_migrations, load_migrations
from fairlane_scheduler.app import create_app
from fairlane_scheduler.service import PlacementService
from fairlane_scheduler.settings import SchedulerSettings

GPUS_PER_NODE = 8
GIB = 1024**3


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


class GcClock:
    """Wall time the cyclic garbage collector spends, in all and in gen-2 collections,
    while it is installed (``gc.callbacks``): what the long-lived fleet costs it."""

    def __init__(self) -> None:
        self.total_s = self.full_s = 0.0
        self.full = 0
        self._started = 0.0

    def __call__(self, phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            self._started = time.perf_counter()
            return
        took = time.perf_counter() - self._started
        self.total_s += took
        if info["generation"] == 2:
            self.full_s += took
            self.full += 1

    def __enter__(self) -> GcClock:
        gc.callbacks.append(self)
        return self

    def __exit__(self, *exc: object) -> None:
        gc.callbacks.remove(self)


def _cpu_s(pid: int, *, reaped: bool) -> float:
    """User + system CPU seconds of a process (and of its reaped children)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(f) for f in fields[11 : 15 if reaped else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


def _server_cpu_s(backend: int) -> float:
    """CPU seconds of the Postgres server a backend belongs to: the postmaster, the
    backends it reaped and the live ones."""
    postmaster = int(Path(f"/proc/{backend}/stat").read_text().rsplit(")", 1)[1].split()[1])
    total = _cpu_s(postmaster, reaped=True)
    for child in Path(f"/proc/{postmaster}/task/{postmaster}/children").read_text().split():
        with contextlib.suppress(OSError):  # a backend that ended meanwhile
            total += _cpu_s(int(child), reaped=False)
    return total


async def postgres_cpu_s(dsn: str) -> float | None:
    """CPU seconds the Postgres server has used so far; None when it is not a local
    process this one can read."""
    conn = await asyncpg.connect(dsn)
    try:
        return _server_cpu_s(int(await conn.fetchval("SELECT pg_backend_pid()")))
    except OSError:
        return None
    finally:
        await conn.close()


def pgbench_tps(dsn: str, clients: int, seconds: int) -> float:
    """Commits per second of pgbench's simple-update transaction on the same server."""
    url = urlparse(dsn)
    pgbench = next(Path("/usr/lib/postgresql").glob("*/bin/pgbench"))
    conn = [
        "-h",
        url.hostname or "127.0.0.1",
        "-p",
        str(url.port or 5432),
        "-U",
        url.username or "postgres",
    ]
    db = url.path.lstrip("/")
    subprocess.run([pgbench, *conn, "-i", "-q", "-s", "1", db], check=True, capture_output=True)
    out = subprocess.run(
        [pgbench, *conn, "-N", "-c", str(clients), "-j", "2", "-T", str(seconds), db],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    match = re.search(r"tps = ([\d.]+) \(without initial connection time\)", out)
    assert match, out
    return float(match.group(1))


async def fresh_database(server_dsn: str) -> str:
    name = f"bench_{uuid.uuid4().hex[:8]}"
    admin = await asyncpg.connect(server_dsn)
    await admin.execute(f'CREATE DATABASE "{name}"')
    await admin.close()
    return f"{server_dsn.rsplit('/', 1)[0]}/{name}"


def synthetic_score(prefix: str, i: int, score: float, ts_ms: int) -> GpuScore:
    """The ``i``-th GPU of a synthetic fleet of 8-GPU H100 nodes named ``prefix-NNNNN``."""
    return GpuScore(
        schema_="gpu-score/1",
        node=f"{prefix}-{i // GPUS_PER_NODE:05d}",
        uuid=f"GPU-{prefix}-{i}",
        index=i % GPUS_PER_NODE,
        model="NVIDIA H100 80GB HBM3",
        score=score,
        speed=2.6,
        effective_capacity=score * 2.6,
        components={},
        samples_in_window=10,
        stale=False,
        mem_total_bytes=80 * GIB,
        ts_ms=ts_ms,
    )


async def publish_fleet(bootstrap: str, prefix: str, gpus: int) -> None:
    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap, linger_ms=50, max_batch_size=512 * 1024
    )
    await producer.start()
    now = int(time.time() * 1000)
    rng = np.random.default_rng(0)
    try:
        futures = []
        for i in range(gpus):
            record = synthetic_score(prefix, i, float(rng.uniform(0.5, 1.0)), now)
            futures.append(
                await producer.send(GPU_SCORES, encode(record), key=record.uuid.encode())
            )
        await asyncio.gather(*futures)
    finally:
        await producer.stop()


async def hold_for_another_replica(dsn: str, prefix: str, nodes: int) -> None:
    """Live placements of another replica on every GPU of the fleet's first ``nodes``
    nodes (one 8-GPU placement a node), written before the scheduler starts: a full
    cluster, whose live rows each replica's snapshot of the committed rows reads."""
    conn = await asyncpg.connect(dsn)
    try:
        await apply_migrations(conn, load_migrations())
        await conn.execute(
            """INSERT INTO placements (id, namespace, job_id, request, request_sha256, state,
                                       assignment, master_node, master_port)
               SELECT gen_random_uuid(), 'other', 'held-' || n, '{}', 'f', 'placed', '[]',
                      $1 || '-' || lpad(n::text, 5, '0'), 29500
                 FROM generate_series(0, $2 - 1) AS n""",
            prefix,
            nodes,
        )
        await conn.execute(
            """INSERT INTO allocations (placement_id, node, gpu_uuid, gpu_index, score,
                                        namespace, model)
               SELECT p.id, p.master_node,
                      'GPU-' || $1 || '-' || ($2 * substr(p.job_id, 6)::int + g), g, 0.9,
                      'other', 'H100-80GB'
                 FROM placements AS p, generate_series(0, $2 - 1) AS g""",
            prefix,
            GPUS_PER_NODE,
        )
        await conn.execute("ANALYZE")
    finally:
        await conn.close()


async def trivial_ceiling(args: argparse.Namespace) -> dict[str, float]:
    """Place + release pairs/s against :func:`trivial_app`: same transport, same clients."""
    transport = httpx.ASGITransport(app=trivial_app())
    async with httpx.AsyncClient(transport=transport, base_url="http://bench") as client:
        cpu_started = time.process_time()
        loop = in_process_client(client, transport, args.client)
        result = await load([loop], args.clients, args.seconds)
    cpu_ms = 1000 * (time.process_time() - cpu_started)
    return result | {"cpu_ms_per_pair": cpu_ms / max(result["placed"], 1)}


async def fresh_fleet(args: argparse.Namespace, gpus: int, held_share: float) -> tuple[str, str]:
    """A fleet of ``gpus`` on the broker and a new database, ``held_share`` of the nodes
    held by another replica's live placements: the fleet's name prefix and the DSN."""
    prefix = f"b{gpus}-{uuid.uuid4().hex[:6]}"
    await publish_fleet(args.bootstrap, prefix, gpus)
    dsn = await fresh_database(args.database_url)
    if held_share:
        await hold_for_another_replica(dsn, prefix, int(gpus // GPUS_PER_NODE * held_share))
    return prefix, dsn


def _writes(service: PlacementService, since: dict[str, float] | None = None) -> dict[str, float]:
    """The service's writes so far (or since ``since``): placements and releases per
    write, and the writes Postgres refused for a GPU or port (conflicts, retried)."""
    writes, carried = service.group_commits
    ends, ended = service.group_ends
    now: dict[str, float] = {
        "writes": writes,
        "carried": carried,
        "ends": ends,
        "ended": ended,
        "conflicts": service.conflicts,
    }
    if since is None:
        return now
    grew = {name: value - since[name] for name, value in now.items()}
    return {
        "per_write": grew["carried"] / max(grew["writes"], 1),
        "ends_per_write": grew["ended"] / max(grew["ends"], 1),
        "conflicts": grew["conflicts"],
    }


async def run_size(
    args: argparse.Namespace, gpus: int, held_share: float = 0.0
) -> dict[str, float]:
    """The 16-client load and the one-client latency at ``gpus`` GPUs, ``held_share`` of
    the nodes held by another replica's live placements."""
    prefix, dsn = await fresh_fleet(args, gpus, held_share)
    settings = SchedulerSettings(
        kafka_bootstrap_servers=args.bootstrap,
        database_url=dsn,
        auth_disabled=True,
        db_pool_max=args.clients + 4,
        stale_after_s=3600,
    )
    app = create_app(settings)
    transport = httpx.ASGITransport(app=app)
    result: dict[str, float] = {"gpus": gpus}
    async with (
        app.router.lifespan_context(app),
        httpx.AsyncClient(transport=transport, base_url="http://bench") as client,
    ):
        clients = [in_process_client(client, transport, args.client)]
        fleet = app.state.runtime.fleet
        while sum(1 for u in fleet.row if u.startswith(f"GPU-{prefix}-")) < gpus:  # noqa: ASYNC110
            await asyncio.sleep(0.5)
        result["rss_mib"] = rss_mib()
        result["view_gpus"] = len(fleet)  # the topic keeps earlier sizes' fleets too
        service = app.state.runtime.service
        writes_before = _writes(service)
        profile = cProfile.Profile() if args.profile else None
        pg_started = await postgres_cpu_s(dsn)
        cpu_started = time.process_time()
        if profile is not None:
            profile.enable()
        with GcClock() as collector:
            result |= await load(clients, args.clients, args.seconds, args.share)
        if profile is not None:
            profile.disable()
            profile.dump_stats(f"{args.profile}.{gpus}")
        placed = max(result["placed"], 1)
        result["gc_ms_per_pair"] = 1000 * collector.total_s / placed
        result["gc_full_ms_per_pair"] = 1000 * collector.full_s / placed
        result["gc_full"] = collector.full
        result |= _writes(service, since=writes_before)
        result["cpu_ms_per_pair"] = (
            1000 * (time.process_time() - cpu_started) / max(result["placed"], 1)
        )
        pg_ended = await postgres_cpu_s(dsn)
        if pg_started is not None and pg_ended is not None:
            result["pg_cpu_ms_per_pair"] = 1000 * (pg_ended - pg_started) / max(result["placed"], 1)
        one = await load(clients, 1, min(args.seconds, 3.0), args.share)
        result |= {"one_p50_ms": one["p50_ms"], "one_p99_ms": one["p99_ms"]}
        if args.extender_calls and not held_share and gpus >= args.extender_nodes * GPUS_PER_NODE:
            names = sorted({g.node for g in fleet.records.values() if g.node.startswith(prefix)})
            pod = {"spec": {"containers": [{"resources": {"limits": {"nvidia.com/gpu": "4"}}}]}}
            call = {"Pod": pod, "NodeNames": names[: args.extender_nodes]}
            timings = []
            for _ in range(args.extender_calls):
                started = time.perf_counter()
                await client.post("/v1/extender/filter", json=call)
                await client.post("/v1/extender/prioritize", json=call)
                timings.append(time.perf_counter() - started)
            result["extender_p50_ms"] = percentile(timings, 50)
            result["extender_p99_ms"] = percentile(timings, 99)
    return result


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:29396")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:25637/fairlane")
    parser.add_argument("--sizes", default="1000,10000,100000")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--extender-nodes", type=int, default=5000)
    parser.add_argument("--extender-calls", type=int, default=200)
    parser.add_argument(
        "--held-share",
        type=float,
        default=0.9,
        help="once more at the largest size, this share of its nodes held by another "
        "replica's live placements (a full cluster); 0: skip",
    )
    parser.add_argument(
        "--client",
        choices=("httpx", "transport"),
        default="httpx",
        help="the in-process load's client, for the trivial endpoint and the scheduler "
        "alike: httpx.AsyncClient on the ASGI transport (the targets' harness), or the "
        "bare transport (a lighter harness)",
    )
    parser.add_argument(
        "--share", type=float, help="jobs of this share of one GPU each (default: whole GPUs)"
    )
    parser.add_argument("--http-gpus", type=int, default=10000, help="0: skip real HTTP")
    parser.add_argument("--http-port", type=int, default=28590)
    parser.add_argument(
        "--profile", help="write a cProfile of each size's 16-client load to PROFILE.<gpus>"
    )
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    await ensure_topics(args.bootstrap)
    commit_tps = pgbench_tps(args.database_url, args.clients, int(args.seconds))
    print(f"pgbench simple-update, {args.clients} clients: {commit_tps:,.0f} commits/s (durable)")
    print(f"rss at start: {rss_mib():.0f} MiB, pid {os.getpid()}")
    sizes = [int(s) for s in args.sizes.split(",")]
    cases = [(gpus, 0.0) for gpus in sizes]
    if args.held_share:
        cases.append((max(sizes), args.held_share))
    for gpus, held_share in cases:
        # The ceiling right before each size: on a shared machine the load drifts.
        ceiling = await trivial_ceiling(args)
        print(
            f"trivial endpoint, {args.clients} clients: {ceiling['placements_per_s']:,.0f} "
            f"place+release pairs/s, POST p50 {ceiling['p50_ms']:.2f} ms "
            f"p99 {ceiling['p99_ms']:.2f} ms, CPU {ceiling['cpu_ms_per_pair']:.2f} ms per pair"
        )
        r = await run_size(args, gpus, held_share)
        held = (
            f" more, {int(gpus // GPUS_PER_NODE * held_share):,} of their nodes held by "
            "another replica's live placements"
            if held_share
            else ""
        )
        line = (
            f"{gpus:>7,} GPUs{held}: {r['placements_per_s']:7.1f} placements/s "
            f"({r['placements_per_s'] / ceiling['placements_per_s']:.2f} x trivial, "
            f"{r['placements_per_s'] / commit_tps:.3f} x pgbench), "
            f"POST p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms "
            f"(1 client: p50 {r['one_p50_ms']:.1f} ms p99 {r['one_p99_ms']:.1f} ms), "
            f"CPU {r['cpu_ms_per_pair']:.2f} ms per pair (process, clients included; "
            f"Postgres {r.get('pg_cpu_ms_per_pair', float('nan')):.2f} ms), "
            f"GC {r['gc_ms_per_pair']:.3f} ms per pair ({r['gc_full']:.0f} gen-2 "
            f"collections: {r['gc_full_ms_per_pair']:.3f} ms), "
            f"{r['per_write']:.1f} placements and {r['ends_per_write']:.1f} releases per write "
            f"({r['conflicts']:.0f} refused), "
            f"RSS {r['rss_mib']:.0f} MiB with {r['view_gpus']:,} GPUs in the view"
        )
        if "extender_p99_ms" in r:
            line += (
                f"; extender filter+prioritize for {args.extender_nodes} nodes: "
                f"p50 {r['extender_p50_ms']:.1f} ms p99 {r['extender_p99_ms']:.1f} ms"
            )
        print(line, flush=True)
    if args.http_gpus:
        await publish_fleet(args.bootstrap, f"h{uuid.uuid4().hex[:6]}", args.http_gpus)
        for replicas in (1, 3):
            ceiling = await trivial_http(
                clients=args.clients, seconds=args.seconds, port=args.http_port
            )
            print(
                f"real HTTP, trivial endpoint (uvicorn, its own process), {args.clients} "
                f"clients in another process: {ceiling['placements_per_s']:,.0f} pairs/s, "
                f"POST p50 {ceiling['p50_ms']:.1f} ms p99 {ceiling['p99_ms']:.1f} ms, "
                f"server CPU {ceiling['server_cpu_ms_per_pair']:.2f} ms per pair, "
                f"loader {ceiling['loader_cpu_ms_per_pair']:.2f}",
                flush=True,
            )
            r = await run_replicas(
                replicas=replicas,
                bootstrap=args.bootstrap,
                dsn=await fresh_database(args.database_url),
                clients=args.clients,
                seconds=args.seconds,
                first_port=args.http_port,
            )
            print(
                f"real HTTP, {replicas} replica(s), {args.clients} clients in another process: "
                f"{r['placements_per_s']:.1f} placements/s "
                f"({r['placements_per_s'] / ceiling['placements_per_s']:.2f} x trivial over HTTP, "
                f"{r['placements_per_s'] / commit_tps:.3f} x pgbench), "
                f"POST p50 {r['p50_ms']:.1f} ms p99 {r['p99_ms']:.1f} ms, "
                f"scheduler CPU {r['server_cpu_ms_per_pair']:.2f} ms per pair, "
                f"loader {r['loader_cpu_ms_per_pair']:.2f}, "
                f"conflicts retried {r['conflicts']:.0f}, lost {r['lost']:.0f}, "
                f"live left {r['live_left']}, deadlocks {r['deadlocks']}",
                flush=True,
            )


if __name__ == "__main__":
    # The loop the scheduler serves on (fairlane_scheduler.__main__); the trivial
    # endpoint runs on it too, so the ratio compares like with like.
    uvloop.run(main())
