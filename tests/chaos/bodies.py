"""Hostile bodies against one scheduler replica under the placement load (issue 35): a
1 GB body without a token and with one, each declared and then chunked, and a crowd of
clients that trickle their bodies. Each row gives its figures (time to the answer's
first byte, resident memory before and at its peak) and holds them to the bounds:
refused within a second, the memory growing by less than 50 MiB, the trickling bodies
cut off at the deadline while the replica goes on answering."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.chaos.context import Context
from tests.chaos.report import Row
from tests.chaos.stack import TOKEN
from tests.hostile_http import GIB, Answer, peak_rss_mib, send_huge_body, trickle_body

__all__ = ["huge_body", "huge_body_with_token", "slow_bodies"]

MAX_ANSWER_S = 1.0
#: /healthz beside 50 slow clients, timed from the suite's own busy process: loose.
MAX_HEALTH_S = 2.0
MAX_GROWTH_MIB = 50
#: The scheduler's default FAIRLANE_BODY_TIMEOUT_S, and what the answer may take beyond it.
BODY_TIMEOUT_S, DEADLINE_SLACK_S = 10.0, 3.0
SLOW_CLIENTS, TRICKLE_EVERY_S = 50, 2.0
_PATH = "/v1/placements"


def _huge(ctx: Context, row: Row, token: str | None, status: int) -> Row:
    before_load = ctx.loads()
    url, pid = ctx.stack.api(0), ctx.stack.services["scheduler-0"].pid
    row.injected = f"POST {_PATH} with 1 GB of body, declared then chunked, to scheduler-0"
    for chunked in (False, True):
        kind = "chunked" if chunked else "declared"
        answer, before, peak = asyncio.run(_measured(url, pid, token, chunked))
        row.notes.append(
            f"{kind}: {answer.status} after {answer.first_byte_s * 1000:.0f} ms, "
            f"{answer.sent_bytes / (1 << 20):.0f} MiB sent, RSS {before:.0f} -> {peak:.0f} MiB"
        )
        row.check(answer.status == status, f"{kind}: answered {answer.status}, not {status}")
        row.check(answer.first_byte_s < MAX_ANSWER_S, f"{kind}: answered after > 1 s")
        row.check(peak - before < MAX_GROWTH_MIB, f"{kind}: RSS grew {peak - before:.0f} MiB")
        row.check(answer.closed, f"{kind}: the connection stayed open")
    ctx.finish(row, time.monotonic(), before_load)
    return row


async def _measured(
    url: str, pid: int, token: str | None, chunked: bool
) -> tuple[Answer, float, float]:
    async with peak_rss_mib(pid) as rss:
        answer = await send_huge_body(url, _PATH, GIB, token=token, chunked=chunked)
    return answer, rss[0], rss[1]


def huge_body(ctx: Context) -> Row:
    return _huge(ctx, Row("1 GB body without token"), None, 401)


def huge_body_with_token(ctx: Context) -> Row:
    return _huge(ctx, Row("1 GB body with token"), TOKEN, 413)


async def _crowd(url: str, pid: int) -> tuple[list[Answer], list[float], float, float]:
    """The slow clients, and meanwhile /healthz timed once a second."""
    async with peak_rss_mib(pid) as rss:
        slow = asyncio.gather(
            *(
                trickle_body(url, _PATH, token=TOKEN, every_s=TRICKLE_EVERY_S)
                for _ in range(SLOW_CLIENTS)
            )
        )
        health_s: list[float] = []
        async with httpx.AsyncClient(base_url=url, timeout=5) as client:
            while not slow.done():
                begun = time.monotonic()
                await client.get("/healthz")
                health_s.append(time.monotonic() - begun)
                await asyncio.wait([slow], timeout=1)
        answers = await slow
    return answers, health_s, rss[0], rss[1]


def slow_bodies(ctx: Context) -> Row:
    row = Row("slow-body client")
    before_load = ctx.loads()
    url, pid = ctx.stack.api(0), ctx.stack.services["scheduler-0"].pid
    row.injected = (
        f"{SLOW_CLIENTS} clients POST {_PATH} to scheduler-0, a byte of body every "
        f"{TRICKLE_EVERY_S:g} s"
    )
    answers, health_s, before, peak = asyncio.run(_crowd(url, pid))
    statuses = sorted({a.status or 0 for a in answers})
    slowest = max(a.first_byte_s for a in answers)
    row.notes.append(
        f"answered {statuses} after {min(a.first_byte_s for a in answers):.1f}-{slowest:.1f} s, "
        f"/healthz meanwhile in at most {max(health_s) * 1000:.0f} ms, "
        f"RSS {before:.0f} -> {peak:.0f} MiB"
    )
    row.check(statuses == [408], f"answered {statuses}, not 408")
    row.check(slowest < BODY_TIMEOUT_S + DEADLINE_SLACK_S, f"the last answer took {slowest:.1f} s")
    row.check(all(a.closed for a in answers), "a connection stayed open after its 408")
    row.check(max(health_s) < MAX_HEALTH_S, "the replica was slow to answer /healthz meanwhile")
    row.check(peak - before < MAX_GROWTH_MIB, f"RSS grew {peak - before:.0f} MiB")
    ctx.finish(row, time.monotonic(), before_load)
    return row
