"""``fairlane-scheduler``: serve the placement API with uvicorn."""

from __future__ import annotations

import asyncio
import logging
import socket
import ssl
from collections.abc import Sequence

import uvicorn

from fairlane_runtime.entry import exit_with_error, load_settings
from fairlane_runtime.errors import FairlaneError
from fairlane_runtime.kafka import ensure_topics
from fairlane_runtime.logging import configure_logging
from fairlane_scheduler.adapters.pg_pool import connect_pool
from fairlane_scheduler.api.tokens import TokenFileError
from fairlane_scheduler.app import create_app, database_ssl
from fairlane_scheduler.errors import SchedulerError
from fairlane_scheduler.settings import SchedulerSettings

PROG = "fairlane-scheduler"


async def _preflight(settings: SchedulerSettings) -> None:
    """Fail fast, with one clear line, when Postgres or Kafka is not there or not trusted."""
    pool = await connect_pool(
        settings.database_url.get_secret_value(), max_size=1, ssl=database_ssl(settings)
    )
    await pool.close()
    await ensure_topics(settings.kafka_bootstrap_servers, security=settings.kafka_security())


def _listeners(settings: SchedulerSettings) -> list[socket.socket] | None:
    """The API port and, when set, the extender's own port (None: uvicorn binds)."""
    if settings.extender_port is None:
        return None
    ports = (settings.port, settings.extender_port)
    return [socket.create_server((settings.host, port)) for port in ports]


def main(argv: Sequence[str] | None = None) -> None:
    settings = load_settings(SchedulerSettings, argv, PROG)
    configure_logging(settings.log_level, json=settings.log_json)
    # asyncpg's pool logs each failed attempt to reconnect its idle connections, with a
    # traceback, every few seconds while Postgres is down; the outbox relay, housekeeping
    # and the allocation cache report the outage once when it starts and once when it
    # ends (and count it in /metrics), so only the pool's errors are kept.
    logging.getLogger("asyncpg.pool").setLevel(logging.ERROR)
    try:
        asyncio.run(_preflight(settings))
    except (FairlaneError, SchedulerError, ssl.SSLError) as exc:  # SSLError: a bad key file
        exit_with_error(PROG, exc)
    try:
        app = create_app(settings)
    except TokenFileError as exc:
        exit_with_error(PROG, exc)
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        loop="uvloop",  # a pinned dependency; asyncio's own loop costs more CPU a request
        log_config=None,  # keep our logging setup
        lifespan="on",
    )
    server = uvicorn.Server(config)
    try:
        sockets = _listeners(settings)
    except OSError as exc:
        exit_with_error(PROG, f"cannot listen: {exc}")
    # Server.run, not asyncio.run(server.serve()): only run() builds the configured loop.
    server.run(sockets=sockets)
    if not server.started:
        exit_with_error(PROG, "did not start (see the log above)")


if __name__ == "__main__":
    main()
