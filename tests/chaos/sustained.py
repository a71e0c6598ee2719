"""Sustained load: placements and releases for a while, every process's resident memory
sampled at a fixed period; the slope of each (least squares, MiB per minute)."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

from tests.chaos.context import Context
from tests.chaos.report import Row

__all__ = ["rss_mib", "sustained_load"]

#: A Python service whose memory grows faster than this over a full run is leaking.
#: The servers are reported, not judged: Kafka's JVM grows its heap towards -Xmx by
#: design, and Postgres's figure sums the postmaster and every backend, each counting
#: the shared buffers it has touched (328 -> 436 MiB over the full run's 10 minutes).
MAX_SLOPE_MIB_PER_MIN = 2.0


def rss_mib(pid: int) -> float:
    """Resident memory of ``pid`` and its children (Postgres backends), in MiB."""
    total_kib = 0
    for p in [pid, *_children(pid)]:
        try:
            status = Path(f"/proc/{p}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                total_kib += int(line.split()[1])
    return total_kib / 1024


def _children(pid: int) -> list[int]:
    try:
        text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    except OSError:
        return []
    return [int(c) for c in text.split()]


def _pids(ctx: Context) -> dict[str, int]:
    pids = {name: s.pid for name, s in ctx.stack.services.items() if s.alive}
    return pids | ctx.stack.server_pids()


def sustained_load(ctx: Context) -> Row:
    row = Row("Sustained load")
    before = ctx.loads()
    plan = ctx.plan
    pids = _pids(ctx)
    start = time.monotonic()
    minutes: list[float] = []
    rss: dict[str, list[float]] = {name: [] for name in pids}
    while True:
        minutes.append((time.monotonic() - start) / 60)
        for name, pid in pids.items():
            rss[name].append(rss_mib(pid))
        if time.monotonic() - start >= plan.sustained_s:
            break
        time.sleep(min(plan.rss_every_s, plan.sustained_s - (time.monotonic() - start)))
    placed = ctx.loads()["POST 201"] - before.get("POST 201", 0)
    released = ctx.loads()["DELETE 200"] - before.get("DELETE 200", 0)
    row.injected = (
        f"{plan.sustained_s:.0f} s of placements and releases "
        f"({placed} placed, {released} released); RSS every {plan.rss_every_s:.0f} s"
    )
    slopes = {n: float(np.polyfit(minutes, v, 1)[0]) for n, v in rss.items() if len(v) > 1}
    row.notes.append(
        "RSS MiB first->last, slope MiB/min: "
        + ", ".join(f"{n} {rss[n][0]:.0f}->{rss[n][-1]:.0f} {s:+.2f}" for n, s in slopes.items())
    )
    if plan.sustained_s >= 300:  # shorter runs are all warm-up
        services = ctx.stack.services
        growing = [n for n, s in slopes.items() if s > MAX_SLOPE_MIB_PER_MIN and n in services]
        row.check(not growing, f"memory grows: {', '.join(growing)}")
    ctx.finish(row, time.monotonic(), before)
    return row
