"""The placement benchmark over real HTTP: scheduler replicas as processes of their own
(``python -m fairlane_scheduler``, uvicorn), one Postgres, the load from another process
(``bench.place_load``). :func:`run_replicas` reports the aggregate rate, POST p50/p99, the
CPU the servers and the loader used per placement, the conflicts the replicas retried and
the deadlocks Postgres broke between their writes, and checks that none was lost: every
placement a client was answered with exists, released, and no GPU was live twice.
:func:`trivial_http` is its ceiling: ``bench.trivial_app`` served the same way, the same
loader."""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import httpx

__all__ = ["run_replicas", "trivial_http"]

_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process so far."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _TICKS


async def _ready(url: str, timeout_s: float = 120) -> None:
    deadline = time.monotonic() + timeout_s
    async with httpx.AsyncClient(base_url=url) as client:
        while True:
            try:
                if (await client.get("/readyz")).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"scheduler at {url} never became ready")
            await asyncio.sleep(0.5)


async def _conflicts(url: str) -> float:
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        text = (await client.get("/metrics/")).text
    lines = [line for line in text.splitlines() if line.startswith("fairlane_scheduler_conflicts")]
    return sum(float(line.split()[-1]) for line in lines)


@contextlib.asynccontextmanager
async def _serving(
    modules: list[tuple[str, int, dict[str, str]]],
) -> AsyncIterator[list[asyncio.subprocess.Process]]:
    """``python -m MODULE`` for each (module, port, environment), until every one
    answers /readyz."""
    servers = [
        await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            module,
            "--port",
            str(port),
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
        )
        for module, port, env in modules
    ]
    try:
        await asyncio.gather(*(_ready(f"http://127.0.0.1:{port}") for _, port, _ in modules))
        yield servers
    finally:
        for server in servers:
            if server.returncode is None:
                server.terminate()
        for server in servers:
            await server.wait()


async def _load(
    urls: list[str], servers: list[asyncio.subprocess.Process], clients: int, seconds: float
) -> dict[str, float]:
    """``bench.place_load`` in a process of its own; its figures, with the servers' CPU
    per pair over the same span (the loader reports its own)."""
    before = [cpu_s(s.pid) for s in servers]
    loader = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "bench.place_load",
        "--urls",
        ",".join(urls),
        "--clients",
        str(clients),
        "--seconds",
        str(seconds),
        stdout=asyncio.subprocess.PIPE,
    )
    out, _ = await loader.communicate()
    result: dict[str, float] = json.loads(out)
    server_cpu = sum(cpu_s(s.pid) - b for s, b in zip(servers, before, strict=True))
    return result | {"server_cpu_ms_per_pair": 1000 * server_cpu / max(result["placed"], 1)}


async def trivial_http(*, clients: int, seconds: float, port: int) -> dict[str, float]:
    """The harness's ceiling over real HTTP: ``bench.trivial_app`` served as the
    scheduler is, the same loader."""
    async with _serving([("bench.trivial_app", port, dict(os.environ))]) as servers:
        return await _load([f"http://127.0.0.1:{port}"], servers, clients, seconds)


async def run_replicas(
    *,
    replicas: int,
    bootstrap: str,
    dsn: str,
    clients: int,
    seconds: float,
    first_port: int,
    shares: bool = True,
) -> dict[str, float]:
    """``replicas`` schedulers on one database under the load; each is told its index
    and the count (FAIRLANE_REPLICA_INDEX, FAIRLANE_REPLICAS), so it prefers its own
    share of the nodes; ``shares`` False: each ranks as if it were alone (as before
    replica shares), for an A/B."""
    env = {
        **os.environ,
        "FAIRLANE_KAFKA_BOOTSTRAP_SERVERS": bootstrap,
        "DATABASE_URL": dsn,
        "FAIRLANE_AUTH_DISABLED": "true",
        "FAIRLANE_STALE_AFTER_S": "3600",
        "FAIRLANE_DB_POOL_MAX": str(clients + 4),
        "FAIRLANE_LOG_LEVEL": "error",
    }
    ports = [first_port + i for i in range(replicas)]
    urls = [f"http://127.0.0.1:{port}" for port in ports]
    count = replicas if shares else 1
    replica_envs = [
        env | {"FAIRLANE_REPLICAS": str(count), "FAIRLANE_REPLICA_INDEX": str(i % count)}
        for i in range(replicas)
    ]
    modules = [("fairlane_scheduler", port, e) for port, e in zip(ports, replica_envs, strict=True)]
    async with _serving(modules) as servers:
        result = await _load(urls, servers, clients, seconds)
        conflicts = sum([await _conflicts(u) for u in urls])
    conn = await asyncpg.connect(dsn)
    try:
        released = await conn.fetchval("SELECT count(*) FROM placements WHERE state = 'released'")
        live = await conn.fetchval("SELECT count(*) FROM allocations WHERE live")
        # The replicas' backends have exited, so their statistics are flushed.
        deadlocks = await conn.fetchval(
            "SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()"
        )
    finally:
        await conn.close()
    placed = result["placed"]
    return result | {
        "conflicts": conflicts,
        "lost": placed - released,  # answered 201 and released, yet not stored as released
        "live_left": live,
        "deadlocks": deadlocks,
    }
