"""Bounded bodies on the real scheduler process (uvicorn, httptools, real Postgres and
Kafka): a 1 GB body, with and without a token, is answered within a second, the
connection closed after a few MiB at most, and the process's memory does not follow
the body (an unauthenticated 300 MB POST once grew it by 1.2 GB: issue 35). A body
that trickles is cut off at the deadline."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.hostile_http import GIB, peak_rss_mib, send_huge_body, trickle_body
from tests.processes import free_port, service, wait_for_http

pytestmark = pytest.mark.integration

TOKEN = "bodies-admin"
BODY_TIMEOUT_S = 2.0
MAX_GROWTH_MIB = 50


@dataclass(frozen=True)
class Scheduler:
    url: str
    pid: int


@pytest.fixture
def scheduler(kafka_bootstrap: str, database_url: str, tmp_path: Path) -> Iterator[Scheduler]:
    port, log = free_port(), tmp_path / "scheduler.log"
    env = {
        "KAFKA_BOOTSTRAP_SERVERS": kafka_bootstrap,
        "DATABASE_URL": database_url,
        "FAIRLANE_ADMIN_TOKEN": TOKEN,
        "FAIRLANE_BODY_TIMEOUT_S": str(BODY_TIMEOUT_S),
    }
    with service("fairlane_scheduler", ["--port", str(port)], env, log) as proc:
        url = f"http://127.0.0.1:{port}"
        wait_for_http(f"{url}/healthz", proc, log)
        yield Scheduler(url, proc.pid)


@pytest.mark.parametrize(
    ("token", "chunked", "status"),
    [(None, False, 401), (None, True, 401), (TOKEN, False, 413), (TOKEN, True, 413)],
    ids=["no-token", "no-token-chunked", "token", "token-chunked"],
)
async def test_a_1_gb_body_is_refused_within_a_second_and_costs_no_memory(
    scheduler: Scheduler, token: str | None, chunked: bool, status: int
) -> None:
    # Warm-up: the first refusal's code paths, so that the figure is the body's alone.
    await send_huge_body(scheduler.url, "/v1/placements", 1 << 20, token=token, chunked=chunked)
    async with peak_rss_mib(scheduler.pid) as rss:
        answer = await send_huge_body(
            scheduler.url, "/v1/placements", GIB, token=token, chunked=chunked
        )
    before, peak = rss
    assert answer.status == status
    assert answer.first_byte_s < 1.0
    assert answer.closed  # the rest of the body is never read
    assert answer.sent_bytes < 64 << 20  # what the sockets' buffers took, no more
    assert peak - before < MAX_GROWTH_MIB, f"RSS {before:.0f} -> {peak:.0f} MiB"


async def test_a_body_that_trickles_is_cut_off_at_the_deadline(scheduler: Scheduler) -> None:
    answer = await trickle_body(scheduler.url, "/v1/placements", token=TOKEN, every_s=0.5)
    assert answer.status == 408
    assert BODY_TIMEOUT_S <= answer.first_byte_s < BODY_TIMEOUT_S + 5
    assert answer.closed
