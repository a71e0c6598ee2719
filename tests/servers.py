"""Where the tests' Kafka and Postgres come from, in this order:

1. ``KAFKA_BOOTSTRAP_SERVERS`` / ``DATABASE_URL`` from the environment (CI, compose);
2. testcontainers, when a Docker engine answers;
3. the project's own scripts (scripts/kafka.sh, scripts/postgres.sh) on test ports
   (29092 and 25433 by default) so that a running ``make run`` stack is left alone.

Never a silent skip: if none of these works, the fixture fails with the reason.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import asyncpg

ROOT = Path(__file__).resolve().parents[1]
TEST_KAFKA_PORT = os.environ.get("FAIRLANE_TEST_KAFKA_PORT", "29092")
TEST_PG_PORT = os.environ.get("FAIRLANE_TEST_PG_PORT", "25433")
#: The broker with a SASL_SSL listener and ACLs (tests/integration/test_kafka_sasl_ssl.py);
#: its SASL_SSL listener is this port + 2.
TEST_KAFKA_SECURE_PORT = os.environ.get("FAIRLANE_TEST_KAFKA_SECURE_PORT", "29192")
#: The Postgres with ssl=on (tests/integration/test_postgres_tls.py): its own cluster.
TEST_PG_TLS_PORT = os.environ.get("FAIRLANE_TEST_PG_TLS_PORT", "25434")


def docker_engine_answers() -> bool:
    """Ask the Docker SDK in a child process, so its leaked sockets never reach pytest."""
    probe = "import docker; docker.from_env(timeout=3).ping()"
    try:
        done = subprocess.run(
            [sys.executable, "-c", probe], check=False, capture_output=True, timeout=10
        )
    except subprocess.TimeoutExpired:
        return False
    return done.returncode == 0


def server_script(name: str, *args: str, env: dict[str, str]) -> str:
    result = subprocess.run(
        [str(ROOT / "scripts" / name), *args],
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        check=False,
    )
    if result.returncode != 0:
        raise RuntimeError(
            f"scripts/{name} {' '.join(args)} failed:\n{result.stdout}{result.stderr}"
        )
    return result.stdout


@contextlib.contextmanager
def local_server(name: str, env: dict[str, str]) -> Iterator[str]:
    """A fresh server on the test ports for this session, purged afterwards.

    The test ports belong to the tests: whatever a killed earlier session left there
    (recent scores on the compacted topic, say) would leak into this one, so it goes.
    """
    server_script(name, "down", "--purge", env=env)
    out = server_script(name, "up", env=env)
    try:
        yield out
    finally:
        server_script(name, "down", "--purge", env=env)


@contextlib.contextmanager
def kafka_server() -> Iterator[str]:
    if env := os.environ.get("KAFKA_BOOTSTRAP_SERVERS"):
        yield env
    elif docker_engine_answers():
        from testcontainers.kafka import KafkaContainer

        with KafkaContainer("confluentinc/cp-kafka:7.9.0").with_kraft() as kafka:
            yield kafka.get_bootstrap_server()
    else:
        with local_server("kafka.sh", {"KAFKA_PORT": TEST_KAFKA_PORT}):
            yield f"127.0.0.1:{TEST_KAFKA_PORT}"


@contextlib.contextmanager
def postgres_server() -> Iterator[str]:
    """Yields a DSN of an existing database that tests may create databases from."""
    if env := os.environ.get("DATABASE_URL"):
        yield env
    elif docker_engine_answers():
        from testcontainers.postgres import PostgresContainer

        with PostgresContainer("postgres:15", driver=None) as pg:
            yield pg.get_connection_url()
    else:
        with local_server("postgres.sh", {"PG_PORT": TEST_PG_PORT, "PG_DATABASE": "fairlane"}):
            yield f"postgresql://postgres@127.0.0.1:{TEST_PG_PORT}/fairlane"


async def create_database(dsn: str) -> str:
    """A new, empty database on ``dsn``'s server: its DSN (drop it with drop_database)."""
    name = f"t_{uuid.uuid4().hex[:12]}"
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'CREATE DATABASE "{name}"')
    finally:
        await admin.close()
    base, _, _ = dsn.rpartition("/")
    return f"{base}/{name}"


async def drop_database(dsn: str, database_url: str) -> None:
    """Drop what create_database(``dsn``) made, its open connections too."""
    admin = await asyncpg.connect(dsn)
    try:
        await admin.execute(f'DROP DATABASE "{database_url.rpartition("/")[2]}" WITH (FORCE)')
    finally:
        await admin.close()
