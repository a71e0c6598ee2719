"""The placement benchmark's load: clients that each place a job and release it, in a
loop, until a shared deadline: through httpx's ASGI transport in-process, or, run as a
module, as the load generator of the real-HTTP benchmark in a process of its own, each
loop on a keep-alive connection of its own (bench/http_client.py):

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
from collections.abc import Sequence
from typing import Protocol

import httpx
import numpy as np
import orjson

from bench.http_client import Connection

# httpx's ASGI transport tries `import sniffio` on every request (to detect trio); it is
# not installed, so each try walks sys.path. Both the trivial endpoint and the scheduler
# pay it; a socket server would not, so neither does this harness.
sys.modules.setdefault("sniffio", None)  # type: ignore[arg-type]


def percentile(values: list[float], q: float) -> float:
    return float(np.percentile(np.asarray(values), q)) * 1000 if values else float("nan")


class Client(Protocol):
    """What a load loop calls: the in-process ASGI app through httpx, or a socket."""

    async def place(self, body: dict[str, object]) -> str | None:
        """The new placement's id; None when it was not placed (not 201)."""

    async def release(self, placement_id: str) -> None: ...


class AsgiClient:
    def __init__(self, client: httpx.AsyncClient) -> None:
        self.client = client

    async def place(self, body: dict[str, object]) -> str | None:
        answer = await self.client.post("/v1/placements", json=body)
        return str(answer.json()["id"]) if answer.status_code == 201 else None

    async def release(self, placement_id: str) -> None:
        await self.client.delete(f"/v1/placements/{placement_id}")


class TransportClient:
    """The same httpx ASGI transport without ``httpx.AsyncClient`` in front: no URL
    merging, cookie jar, auth or redirect handling per request. A lighter harness: about
    half the in-process trivial endpoint's CPU a pair (docs/benchmarks-history.md)."""

    _PLACEMENTS = httpx.URL("http://bench/v1/placements")
    _JSON = ((b"host", b"bench"), (b"content-type", b"application/json"))

    def __init__(self, transport: httpx.AsyncBaseTransport) -> None:
        self.transport = transport

    async def place(self, body: dict[str, object]) -> str | None:
        request = httpx.Request(
            "POST", self._PLACEMENTS, content=orjson.dumps(body), headers=self._JSON
        )
        answer = await self.transport.handle_async_request(request)
        content = await answer.aread()
        return str(orjson.loads(content)["id"]) if answer.status_code == 201 else None

    async def release(self, placement_id: str) -> None:
        url = httpx.URL(f"http://bench/v1/placements/{placement_id}")
        answer = await self.transport.handle_async_request(
            httpx.Request("DELETE", url, headers=self._JSON[:1])
        )
        await answer.aread()


def in_process_client(
    client: httpx.AsyncClient, transport: httpx.AsyncBaseTransport, kind: str
) -> Client:
    """A load loop's client of an app on ``transport`` (``client``'s): through ``client``
    ("httpx", the harness the targets are stated for) or the bare transport ("transport")."""
    return TransportClient(transport) if kind == "transport" else AsgiClient(client)


class SocketClient:
    def __init__(self, connection: Connection) -> None:
        self.connection = connection

    async def place(self, body: dict[str, object]) -> str | None:
        status, answer = await self.connection.request("POST", "/v1/placements", orjson.dumps(body))
        return str(orjson.loads(answer)["id"]) if status == 201 else None

    async def release(self, placement_id: str) -> None:
        await self.connection.request("DELETE", f"/v1/placements/{placement_id}")


def job_body(job_id: str, n: int, share: float | None) -> dict[str, object]:
    """The ``n``-th job of a loop: 1-4 whole GPUs in turn, or a ``share`` of one."""
    if share is None:
        return {"job_id": job_id, "gpus_per_node": 1 + n % 4}
    return {"job_id": job_id, "gpus_per_node": 1, "gpu_share": share}


async def place_and_release(
    client: Client, deadline: float, worker: str, share: float | None = None
) -> tuple[int, list[float]]:
    """Until ``deadline`` (perf_counter), shared by all clients: an ASGI app that never
    awaits would otherwise run each client's whole loop before the next one's starts."""
    placed, latencies = 0, []
    for n in itertools.count():
        if time.perf_counter() >= deadline:
            break
        body = job_body(f"{worker}-{n}", n, share)
        started = time.perf_counter()
        placement_id = await client.place(body)
        latencies.append(time.perf_counter() - started)
        if placement_id is not None:
            placed += 1
            await client.release(placement_id)
        await asyncio.sleep(0)  # let the other clients in, as a socket would
    return placed, latencies


async def load(
    clients: Sequence[Client], count: int, seconds: float, share: float | None = None
) -> dict[str, float]:
    """``count`` concurrent loops over ``clients`` (round robin) for ``seconds``:
    place + release pairs/s and POST p50/p99 (ms); jobs of whole GPUs, or of ``share``
    of one GPU each."""
    run = uuid.uuid4().hex[:6]
    started = time.perf_counter()
    outcomes = await asyncio.gather(
        *(
            place_and_release(clients[w % len(clients)], started + seconds, f"{run}-{w}", share)
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
    urls = args.urls.split(",")
    connections = [await Connection.open(urls[w % len(urls)]) for w in range(args.clients)]
    try:
        cpu_started = time.process_time()
        result = await load([SocketClient(c) for c in connections], args.clients, args.seconds)
        cpu_ms = 1000 * (time.process_time() - cpu_started)
        print(json.dumps(result | {"loader_cpu_ms_per_pair": cpu_ms / max(result["placed"], 1)}))
    finally:
        for connection in connections:
            await connection.close()


if __name__ == "__main__":
    asyncio.run(_main())
