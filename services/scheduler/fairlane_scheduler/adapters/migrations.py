"""Versioned schema migrations: numbered SQL files applied once each, in order.

Why not Alembic or yoyo: both bring a second database driver (SQLAlchemy / psycopg) to a
service that speaks asyncpg only, and our migrations are plain SQL. What we need is
small: files named ``NNNN_name.sql``, each applied in its own transaction, recorded with
its checksum in ``schema_migrations``, under an advisory lock so that replicas starting
together do not race, and a loud error when an applied file was edited afterwards.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib import resources

import asyncpg

from fairlane_scheduler.adapters.pg_pool import keeps_session_state
from fairlane_scheduler.errors import MigrationError

__all__ = ["Migration", "MigrationError", "apply_migrations", "load_migrations"]

_LOCK_KEY = 0x46414952  # "FAIR": one advisory lock for the migrator
_NAME = re.compile(r"^(\d{4})_[a-z0-9_]+\.sql$")


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def load_migrations(package: str = "fairlane_scheduler.migrations") -> list[Migration]:
    found = []
    for entry in resources.files(package).iterdir():
        match = _NAME.match(entry.name)
        if match:
            found.append(Migration(int(match.group(1)), entry.name, entry.read_text()))
    found.sort(key=lambda m: m.version)
    versions = [m.version for m in found]
    if len(set(versions)) != len(versions):
        raise MigrationError(f"duplicate migration versions in {package}")
    return found


async def apply_migrations(conn: asyncpg.Connection, migrations: list[Migration]) -> list[str]:
    """Apply what is missing; return the names applied."""
    applied_now: list[str] = []
    keeps_session_state(conn)  # a pooled session is reset if the unlock below never ran
    await conn.execute("SELECT pg_advisory_lock($1)", _LOCK_KEY)
    try:
        # Under the lock: two CREATE TABLE IF NOT EXISTS racing on a fresh database both
        # pass the check and one fails on the catalog's unique index.
        await conn.execute(
            """CREATE TABLE IF NOT EXISTS schema_migrations (
                   version integer PRIMARY KEY, name text NOT NULL, checksum text NOT NULL,
                   applied_at timestamptz NOT NULL DEFAULT now())"""
        )
        rows = await conn.fetch("SELECT version, name, checksum FROM schema_migrations")
        done = {r["version"]: r for r in rows}
        for migration in migrations:
            row = done.get(migration.version)
            if row is not None:
                if row["checksum"] != migration.checksum:
                    raise MigrationError(f"{migration.name} changed after it was applied")
                continue
            async with conn.transaction():
                await conn.execute(migration.sql)
                await conn.execute(
                    "INSERT INTO schema_migrations (version, name, checksum) VALUES ($1, $2, $3)",
                    migration.version,
                    migration.name,
                    migration.checksum,
                )
            applied_now.append(migration.name)
    finally:
        await conn.execute("SELECT pg_advisory_unlock($1)", _LOCK_KEY)
    return applied_now
