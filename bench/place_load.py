"""The placement benchmark's load: clients that each place a job and release it, in a
loop, until a shared deadline. Run as a module it is the load generator of the real-HTTP
benchmark, in a process of its own:

    python -m bench.place_load --urls http://127.0.0.1:28500 --clients 16 --seconds 10
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import sys
import time
import uuid

import httpx
import numpy as np

# httpx's ASGI transport tries `import sniffio` on every request (to detect trio); it is
# not installed, so each try walks sys.path. Both the trivial endpoint and the scheduler
# pay it; a socket server would not, so neither does this harness.
sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000 if values else float("nan")


async def place_and_release(
    client: httpx.AsyncClient, deadline: float, worker: str
) -> tuple[int, list[float]]:
    """Until ``deadline`` (perf_counter), shared by all clients: an ASGI app that never
    awaits would otherwise run each client's whole loop before the next one's starts."""
    placed, latencies = 0, []
    for n in itertools.count():
        if time.perf_counter() >= deadline:
            break
        body = {"job_id": f"{worker}-{n}", "gpus_per_node": 1 + n % 4}
        started = time.perf_counter()
        answer = await client.post("/v1/placements", json=body)
        latencies.append(time.perf_counter() - started)
        if answer.status_code == 201:
            placed += 1
            await client.delete(f"/v1/placements/{answer.json()['id']}")
        await asyncio.sleep(0)  # let the other clients in, as a socket would
    return placed, latencies


async def load(clients: list[httpx.AsyncClient], count: int, seconds: float) -> dict[str, float]:
    """``count`` concurrent loops over ``clients`` (round robin) for ``seconds``:
    place + release pairs/s and POST p50/p99 (ms)."""
    run = uuid.uuid4().hex[:6]
    started = time.perf_counter()
    outcomes = await asyncio.gather(
        *(
            place_and_release(clients[w % len(clients)], started + seconds, f"{run}-{w}")
            for w in range(count)
        )
    )
    elapsed = time.perf_counter() - started
    latencies = [x for _, lat in outcomes for x in lat]
    return {
        "placed": sum(p for p, _ in outcomes),
        "placements_per_s": sum(p for p, _ in outcomes) / elapsed,
        "p50_ms": percentile(latencies, 50),
        "p99_ms": percentile(latencies, 99),
    }


async def _main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--urls", required=True, help="comma-separated scheduler base URLs")
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    limits = httpx.Limits(max_connections=args.clients, max_keepalive_connections=args.clients)
    clients = [httpx.AsyncClient(base_url=u, limits=limits) for u in args.urls.split(",")]
    try:
        print(json.dumps(await load(clients, args.clients, args.seconds)))
    finally:
        for client in clients:
            await client.aclose()


if __name__ == "__main__":
    asyncio.run(_main())
