"""Three scheduler replicas with and without their own shares of the nodes, in pairs
(not a test): each pair runs ``run_replicas`` (bench/scheduler_http.py: real HTTP, one
durable Postgres, a fresh database each run) first as before (every replica ranks as if
it were alone, so all take the same node and GPUs) and then with shares (each told its
index and the count), on the same fleet, so a shared machine's drift hits both alike.
Prints each run's placements/s and the conflicts the replicas retried.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import uuid

from bench.scheduler_http import run_replicas
from bench.scheduler_place import fresh_database, publish_fleet
from fairlane_runtime.kafka import ensure_topics

_FIGURES = ("placements_per_s", "p99_ms", "conflicts", "deadlocks", "lost", "live_left")


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--bootstrap", default="127.0.0.1:29396")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:25637/fairlane")
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--replicas", type=int, default=3)
    parser.add_argument("--pairs", type=int, default=3)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--port", type=int, default=28590)
    args = parser.parse_args()
    logging.basicConfig(level=logging.ERROR)
    await ensure_topics(args.bootstrap)
    await publish_fleet(args.bootstrap, f"h{uuid.uuid4().hex[:6]}", args.gpus)
    for pair in range(args.pairs):
        for shares in (False, True):
            r = await run_replicas(
                replicas=args.replicas,
                bootstrap=args.bootstrap,
                dsn=await fresh_database(args.database_url),
                clients=args.clients,
                seconds=args.seconds,
                first_port=args.port,
                shares=shares,
            )
            label = "with shares" if shares else "alone (before)"
            figures = ", ".join(f"{name} {r[name]:.1f}" for name in _FIGURES)
            print(f"pair {pair + 1}, {args.replicas} replicas {label}: {figures}", flush=True)


if __name__ == "__main__":
    asyncio.run(main())
