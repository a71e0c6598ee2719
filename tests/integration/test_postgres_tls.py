"""The scheduler verifies Postgres's certificate (sslmode=verify-full), against a real
Postgres started by scripts/postgres.sh with ssl=on and a CA generated for this run.

The server's certificate names only IP:127.0.0.1, so connecting to ``localhost`` (the
same server) is a connection to a host the certificate is not for. Always the script's
own cluster on its own port (FAIRLANE_TEST_PG_TLS_PORT): a DATABASE_URL from the
environment cannot be told to turn TLS on.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fairlane_scheduler.adapters.pg_pool import connect_pool
from fairlane_scheduler.adapters.pg_tls import client_ssl
from fairlane_scheduler.errors import DatabaseTlsError
from tests.processes import failed_start
from tests.servers import TEST_PG_TLS_PORT, local_server
from tests.tls import self_signed

PORT = TEST_PG_TLS_PORT


@pytest.fixture(scope="module")
def root_cert(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    env = {
        "PG_PORT": PORT,
        "PG_SSL": "1",
        "PG_SSL_SAN": "IP:127.0.0.1",
        "FAIRLANE_STATE_DIR": str(tmp_path_factory.mktemp("pg-tls")),
    }
    with local_server("postgres.sh", env) as out:
        lines = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
        yield Path(lines["PG_SSL_ROOT_CERT"])


def _url(host: str) -> str:
    return f"postgresql://postgres@{host}:{PORT}/fairlane"


async def test_a_verified_server_is_accepted_and_the_connection_is_encrypted(
    root_cert: Path,
) -> None:
    pool = await connect_pool(_url("127.0.0.1"), ssl=client_ssl("verify-full", rootcert=root_cert))
    try:
        async with pool.acquire() as conn:
            used = await conn.fetchval("SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()")
        assert used is True
    finally:
        await pool.close()


async def test_a_certificate_for_another_host_name_is_refused(root_cert: Path) -> None:
    with pytest.raises(DatabaseTlsError, match=r"Hostname mismatch.*'localhost'") as caught:
        await connect_pool(_url("localhost"), ssl=client_ssl("verify-full", rootcert=root_cert))
    assert not caught.value.retryable


async def test_a_server_signed_by_another_ca_is_refused(root_cert: Path, tmp_path: Path) -> None:
    other, _ = self_signed(tmp_path, "other-ca")
    with pytest.raises(DatabaseTlsError, match="unable to get local issuer certificate"):
        await connect_pool(_url("127.0.0.1"), ssl=client_ssl("verify-full", rootcert=other))


def test_the_service_refuses_the_wrong_host_with_one_line_and_exit_code_2(
    root_cert: Path,
) -> None:
    env = {
        "DATABASE_URL": _url("localhost"),
        "FAIRLANE_DATABASE_SSLMODE": "verify-full",
        "FAIRLANE_DATABASE_SSLROOTCERT": str(root_cert),
        "FAIRLANE_AUTH_DISABLED": "true",
    }
    code, errors = failed_start("fairlane_scheduler", [], env)
    assert code == 2
    assert errors == [
        "fairlane-scheduler: error: Postgres's certificate was refused: Hostname mismatch, "
        "certificate is not valid for 'localhost'; check the host name in DATABASE_URL "
        "against the certificate and FAIRLANE_DATABASE_SSLROOTCERT"
    ]
