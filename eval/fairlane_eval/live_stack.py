"""The live evaluation's stack: the project's Kafka and Postgres, the services as
processes, their environment, and the few Kafka and HTTP calls the run makes on them."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Sequence
from pathlib import Path
from typing import Any

import httpx
from aiokafka import AIOKafkaConsumer, TopicPartition

from fairlane_eval.errors import LiveError
from fairlane_events.codec import decode
from fairlane_events.records import NodeSample
from fairlane_events.topics import NODE_SAMPLES, STREAM_PARTITIONS
from fairlane_scoring.config import ScoreConfig

_ROOT = Path(__file__).resolve().parents[2]  # the repository, for scripts/ (a clone only)
_RETRIES = 4
START_TIMEOUT_S = 120.0


@contextlib.asynccontextmanager
async def process(
    module: str, args: Sequence[str], env: dict[str, str], log: Path
) -> AsyncIterator[asyncio.subprocess.Process]:
    """``python -m module args`` with its output in ``log``; SIGTERM (then SIGKILL) at exit."""
    with log.open("wb") as out:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", module, *args, env=env, stdout=out, stderr=subprocess.STDOUT
        )
    try:
        yield proc
    finally:
        if proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), 30)
            except TimeoutError:
                proc.kill()
                await proc.wait()


async def until_up(
    client: httpx.AsyncClient, url: str, proc: asyncio.subprocess.Process, log: Path
) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if proc.returncode is not None:
            raise LiveError(f"{log.stem} exited ({proc.returncode}):\n{tail(log)}")
        with contextlib.suppress(httpx.HTTPError):
            if (await client.get(url, timeout=2)).status_code == 200:
                return
        await asyncio.sleep(0.5)
    raise LiveError(f"{url} not up after {START_TIMEOUT_S:.0f} s:\n{tail(log)}")


def prepare_workdir(workdir: Path, scenario_toml: str) -> Path:
    """The run's folder, with the scenario file the agent reads."""
    workdir.mkdir(parents=True, exist_ok=True)
    scenario = workdir / "scenario.toml"
    scenario.write_text(scenario_toml)
    return scenario


def write_key_ring(workdir: Path) -> Path:
    """A fresh key ring for this run's agent to sign with and its scorer to verify with
    (docs/security.md, "Node identity")."""
    ring = workdir / "key-ring"
    ring.touch(mode=0o600)
    ring.write_text(f"eval-1 {secrets.token_hex(24)}\n")
    return ring


def tail(log: Path, chars: int = 3000) -> str:
    return log.read_text(errors="replace")[-chars:] if log.exists() else "(no log)"


async def call(
    client: httpx.AsyncClient, method: str, path: str, json_body: Any = None
) -> httpx.Response:
    """One API call, retried on a dropped connection: every call the run makes is
    idempotent (a placement request repeats under its job id and returns the original)."""
    for attempt in range(_RETRIES):
        try:
            return await client.request(method, path, json=json_body)
        except httpx.TransportError:
            if attempt == _RETRIES - 1:
                raise
            await asyncio.sleep(0.2 * (attempt + 1))
    raise AssertionError("unreachable")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def base_env(kafka: str) -> dict[str, str]:
    """The caller's environment without its FAIRLANE_* settings: the run sets each one
    that both sides must share, and a stray one would change only the live side."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("FAIRLANE_")}
    return {**env, "KAFKA_BOOTSTRAP_SERVERS": kafka}


def scorer_settings_env(score: ScoreConfig, heartbeat_s: float) -> dict[str, str]:
    fixed = {"weights", "thermal_margin_c", "hampel_window", "hampel_n_sigma", "hampel_min_scale"}
    default = ScoreConfig()
    differs = [f for f in fixed if getattr(score, f) != getattr(default, f)]
    if differs:
        raise LiveError(f"the scorer has no setting for {', '.join(sorted(differs))}")
    return {
        "FAIRLANE_INTERVAL_S": str(score.interval_s),
        "FAIRLANE_HISTORY_S": str(score.history_s),
        "FAIRLANE_RECENT_WEIGHT": str(score.recent_weight),
        "FAIRLANE_RECENT_WINDOW_S": str(score.recent_window_s),
        "FAIRLANE_STALE_AFTER_INTERVALS": str(score.stale_after_intervals),
        "FAIRLANE_EMIT_EPSILON": str(score.emit_epsilon),
        "FAIRLANE_HEARTBEAT_S": str(heartbeat_s),
    }


async def first_sample_ms(consumer: AIOKafkaConsumer, prefix: str, timeout_s: float) -> int:
    """The ts_ms of the first node sample of the fleet whose nodes start with ``prefix``."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        for records in (await consumer.getmany(timeout_ms=500)).values():
            for record in records:
                if record.key is not None and record.key.decode().startswith(prefix):
                    return decode(NodeSample, record.value).ts_ms
    raise LiveError(f"no node sample from {prefix}-* within {timeout_s:.0f} s")


async def samples_from_now(kafka: str) -> AIOKafkaConsumer:
    """A consumer of the node samples positioned at their current ends: the next record
    of the run's fleet is its first sample."""
    consumer = AIOKafkaConsumer(bootstrap_servers=kafka, group_id=None, enable_auto_commit=False)
    await consumer.start()
    partitions = [TopicPartition(NODE_SAMPLES, p) for p in range(STREAM_PARTITIONS)]
    consumer.assign(partitions)
    for tp, end in (await consumer.end_offsets(partitions)).items():
        consumer.seek(tp, end)
    return consumer


@contextlib.contextmanager
def own_servers(kafka_port: int, pg_port: int) -> Iterator[tuple[str, str]]:
    """Kafka and Postgres from the project's scripts on ports of their own, purged after."""
    env = {**os.environ, "KAFKA_PORT": str(kafka_port), "PG_PORT": str(pg_port)}

    def script(name: str, *args: str) -> str:
        done = subprocess.run(  # noqa: S603 - the project's own scripts
            [str(_ROOT / "scripts" / name), *args],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if done.returncode != 0:
            raise LiveError(f"scripts/{name} {' '.join(args)}: {done.stdout}{done.stderr}")
        return done.stdout

    try:
        script("kafka.sh", "up")
        url = next(
            line.partition("=")[2]
            for line in script("postgres.sh", "up").splitlines()
            if line.startswith("DATABASE_URL=")
        )
        yield f"127.0.0.1:{kafka_port}", url
    finally:
        with contextlib.suppress(LiveError):
            script("kafka.sh", "down", "--purge")
        with contextlib.suppress(LiveError):
            script("postgres.sh", "down", "--purge")
