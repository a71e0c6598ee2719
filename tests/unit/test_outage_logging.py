"""While a dependency is away, the retry loops log two lines (gone, back), count every
failed attempt in /metrics, and keep tracebacks for the unexpected."""

import asyncio
import logging
from typing import Any, cast

import pytest
from prometheus_client import generate_latest

from fairlane_runtime.outage import OutageLog
from fairlane_scheduler.adapters.live_gpus import LiveGpusCache
from fairlane_scheduler.api.deps import SchedulerMetrics
from fairlane_scheduler.app import housekeeping
from fairlane_scheduler.errors import DatabaseUnavailableError, SchedulerError

LOGGER = "fairlane.scheduler.outage"


class Counter:
    def __init__(self) -> None:
        self.value = 0.0

    def inc(self, amount: float = 1) -> None:
        self.value += amount


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


def test_an_outage_is_two_warnings_and_a_count(caplog: pytest.LogCaptureFixture) -> None:
    now = [100.0]
    failures = Counter()
    outage = OutageLog(logging.getLogger(LOGGER), "relay", failures, clock=lambda: now[0])
    outage.succeeded()  # up and fine: silent
    for _ in range(40):
        outage.failed(DatabaseUnavailableError("Postgres does not answer"))
        now[0] += 1.5
    assert outage.is_down
    outage.succeeded()
    outage.succeeded()
    assert _warnings(caplog) == [
        "relay: dependency unavailable (DatabaseUnavailableError: Postgres does not answer);"
        " retrying quietly until it is back",
        "relay: dependency back after 60.0 s (40 failed attempts)",
    ]
    assert failures.value == 40
    assert not any(r.exc_info for r in caplog.records)


def test_only_the_unexpected_gets_a_traceback(caplog: pytest.LogCaptureFixture) -> None:
    outage = OutageLog(logging.getLogger(LOGGER), "housekeeping", Counter())
    outage.record(DatabaseUnavailableError("down"))
    outage.record(SchedulerError("a domain error, not an outage"))
    outage.record(KeyError("bug"))
    with_traceback = [r for r in caplog.records if r.exc_info]
    assert [r.getMessage() for r in with_traceback] == ["housekeeping failed unexpectedly"]
    assert len(_warnings(caplog)) == 3


class FlakyRefresh:
    """Postgres away for the first ``down_for`` refreshes, then back."""

    def __init__(self, down_for: int) -> None:
        self.calls = 0
        self.down_for = down_for

    async def __call__(self) -> None:
        self.calls += 1
        if self.calls <= self.down_for:
            raise DatabaseUnavailableError("Postgres does not answer: connection refused")


async def _until(condition: Any, timeout_s: float = 5.0) -> None:
    for _ in range(int(timeout_s / 0.01)):
        if condition():
            return
        await asyncio.sleep(0.01)
    raise AssertionError("condition not met")


async def test_the_allocation_cache_logs_an_outage_twice(caplog: pytest.LogCaptureFixture) -> None:
    metrics = SchedulerMetrics.create()
    store = FlakyRefresh(down_for=0)
    cache = LiveGpusCache(
        store,
        lambda: {"gpu-1"},
        metrics.outage("allocation cache", "postgres"),
        refresh_s=0.001,
    )
    await cache.start()  # Postgres answers at start
    store.calls, store.down_for = 0, 30  # then goes away for 30 refreshes
    try:
        await _until(lambda: store.calls > 35)
    finally:
        await cache.stop()
    assert cache.current == {"gpu-1"}
    assert _warnings(caplog) == [
        "allocation cache (postgres): dependency unavailable (DatabaseUnavailableError:"
        " Postgres does not answer: connection refused); retrying quietly until it is back",
        caplog.records[-1].getMessage(),
    ]
    assert "dependency back after" in caplog.records[-1].getMessage()
    assert "(30 failed attempts)" in caplog.records[-1].getMessage()
    scraped = generate_latest(metrics.registry).decode()
    assert (
        'fairlane_scheduler_dependency_failures_total{component="allocation cache",'
        'dependency="postgres"} 30.0' in scraped
    )


class FlakyService:
    def __init__(self, failures: list[Exception]) -> None:
        self.failures = failures
        self.rounds = 0

    async def expire_due(self) -> list[Any]:
        self.rounds += 1
        if self.failures:
            raise self.failures.pop(0)
        return []

    async def place_pending(self) -> list[Any]:
        return []


async def test_housekeeping_survives_an_outage_and_a_bug(caplog: pytest.LogCaptureFixture) -> None:
    metrics = SchedulerMetrics.create()
    down = [DatabaseUnavailableError("Postgres does not answer")] * 20
    service = FlakyService([*down, RuntimeError("a bug")])
    task = asyncio.create_task(
        housekeeping(cast("Any", service), 0.001, metrics.outage("housekeeping", "postgres"))
    )
    try:
        await _until(lambda: service.rounds > 25)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    messages = _warnings(caplog)
    assert len(messages) == 3, messages  # gone, the bug (with its traceback), back
    assert messages[0].startswith("housekeeping (postgres): dependency unavailable")
    assert messages[1] == "housekeeping (postgres) failed unexpectedly"
    assert messages[2].startswith("housekeeping (postgres): dependency back after")
    assert [r.getMessage() for r in caplog.records if r.exc_info] == [messages[1]]
