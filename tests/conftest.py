"""Session-wide real servers and per-test isolation (fresh database, unique names)."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator

import pytest
from hypothesis import HealthCheck, settings

from fairlane_runtime.kafka import ensure_topics
from tests.kube import (
    ControlPlane,
    ControlPlaneBuildError,
    build_control_plane,
    control_plane,
)
from tests.processes import free_port
from tests.servers import create_database, drop_database, kafka_server, postgres_server

# No timed assertions in tests (speed lives in bench/): hypothesis's per-example deadline
# (200 ms) and its too-slow health check are such assertions, and fail at random on a
# busy 2-core machine (CI, or the server-less half of `make test` at nice 19).
settings.register_profile("fairlane", deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("fairlane")


def pytest_collection_finish(session: pytest.Session) -> None:
    """Build the Kubernetes tests' control plane before the first test when any was
    collected: a first build takes about 10 minutes, more than a test's timeout."""
    wanted = any("kube_plane" in getattr(item, "fixturenames", ()) for item in session.items)
    if session.config.option.collectonly or not wanted:
        return
    capture = session.config.pluginmanager.getplugin("capturemanager")
    with capture.global_and_fixture_disabled():  # its progress lines show as they come
        try:
            build_control_plane()
        except ControlPlaneBuildError as exc:
            pytest.exit(f"the Kubernetes tests cannot run: {exc}", returncode=2)


@pytest.fixture(scope="session")
def kafka_bootstrap() -> Iterator[str]:
    with kafka_server() as bootstrap:
        asyncio.run(ensure_topics(bootstrap))
        yield bootstrap


@pytest.fixture(scope="session")
def postgres_dsn() -> Iterator[str]:
    with postgres_server() as dsn:
        yield dsn


@pytest.fixture(scope="session")
def kube_plane() -> Iterator[ControlPlane]:
    """etcd, kube-apiserver and kube-scheduler (tests/kube.py), the extender expected on
    a port chosen now; built at collection (pytest_collection_finish)."""
    with control_plane(free_port()) as plane:
        yield plane


@pytest.fixture
async def database_url(postgres_dsn: str) -> AsyncIterator[str]:
    """A fresh, empty database for one test, dropped afterwards."""
    url = await create_database(postgres_dsn)
    yield url
    await drop_database(postgres_dsn, url)


@pytest.fixture
def unique() -> str:
    """A short unique token for node names, job ids and consumer groups."""
    return uuid.uuid4().hex[:8]
