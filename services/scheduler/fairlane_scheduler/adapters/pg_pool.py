"""The scheduler's asyncpg pool: how it connects, what counts as Postgres being away,
and a release that costs no round trip.

asyncpg resets every connection it takes back (advisory locks, cursors, LISTENs,
session settings: one more statement per acquire). The placement path keeps no session
state, so that statement doubled its round trips; only a session that took an advisory
lock (the outbox relay's leader) is reset, by its server process id. An open
transaction is rolled back on release either way (asyncpg does that before the reset).
"""

from __future__ import annotations

import ssl as ssl_module
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import asyncpg

from fairlane_scheduler.errors import DatabaseTlsError, DatabaseUnavailableError

__all__ = ["POSTGRES_UNAVAILABLE", "connect_pool", "keeps_session_state", "pooled"]

#: What asyncpg raises while Postgres is away: refused or dropped connections (OSError,
#: class 08), a server shutting down or starting (57P01-57P03), and a query on a pooled
#: connection still consuming the shutdown's unsolicited error (InternalClientError,
#: "cannot switch to state 12; another operation (2) is in progress": seen in the chaos
#: suite's Postgres outage). Anything else, a cancelled statement (57014) included, is
#: not an outage.
POSTGRES_UNAVAILABLE = (
    OSError,
    asyncpg.PostgresConnectionError,
    asyncpg.exceptions.AdminShutdownError,
    asyncpg.exceptions.CrashShutdownError,
    asyncpg.exceptions.CannotConnectNowError,
    asyncpg.InternalClientError,
)


@asynccontextmanager
async def pooled(pool: asyncpg.Pool) -> AsyncIterator[asyncpg.Connection]:
    """A connection of ``pool``; Postgres being away (:data:`POSTGRES_UNAVAILABLE`)
    raised as :class:`DatabaseUnavailableError` (retryable: 503 with Retry-After)."""
    try:
        async with pool.acquire() as conn:
            yield conn
    except POSTGRES_UNAVAILABLE as exc:
        raise DatabaseUnavailableError(f"Postgres does not answer: {exc}") from exc


_STATEFUL: set[int] = set()  # server pids of pooled sessions that hold session state


def keeps_session_state(conn: asyncpg.Connection | asyncpg.pool.PoolConnectionProxy) -> None:
    """Mark the session of ``conn`` to be reset when the pool takes it back."""
    _STATEFUL.add(conn.get_server_pid())


async def _reset(conn: asyncpg.Connection) -> None:
    pid = conn.get_server_pid()
    if pid in _STATEFUL:
        _STATEFUL.discard(pid)
        await conn.reset()


async def connect_pool(
    dsn: str,
    *,
    min_size: int = 1,
    max_size: int = 10,
    ssl: ssl_module.SSLContext | str | None = None,
) -> asyncpg.Pool:
    """A started pool; ``ssl`` as :func:`fairlane_scheduler.adapters.pg_tls.client_ssl`
    gives it. A certificate that fails verification is :class:`DatabaseTlsError`."""
    try:
        return await asyncpg.create_pool(
            dsn, min_size=min_size, max_size=max_size, timeout=10, ssl=ssl, reset=_reset
        )
    except ssl_module.SSLCertVerificationError as exc:
        raise DatabaseTlsError(
            f"Postgres's certificate was refused: {exc.verify_message.rstrip('.')}; check "
            "the host name in DATABASE_URL against the certificate and "
            "FAIRLANE_DATABASE_SSLROOTCERT"
        ) from exc
    except (*POSTGRES_UNAVAILABLE, TimeoutError) as exc:
        raise DatabaseUnavailableError(
            f"Postgres is not reachable ({type(exc).__name__}: {exc}); start it with "
            "`scripts/postgres.sh up` or set DATABASE_URL"
        ) from exc
