"""Kafka's disk full under the scorer's changelog topics, and what the scorer does.

The broker has a second log dir on a small tmpfs (stack.small_filesystem) that holds the
scorer's changelog partitions and nothing else (logdirs.py, at start-up). The scenario
fills the tmpfs to the last MiB and watches:
the broker takes the full dir offline, the changelogs lose their only replica. Healing
is what an operator does: free the space and restart the broker (an offline log dir
comes back only with a restart); a scorer that gave up is started again.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import httpx

from tests.chaos.audit import scrape
from tests.chaos.context import Context
from tests.chaos.report import Row

__all__ = ["disk_full"]

_SPARE_BYTES = 1 << 20


def _fill(small: Path) -> Path:
    filler = small / "filler"
    chunk = b"\0" * (1 << 20)
    with filler.open("wb") as f:
        while shutil.disk_usage(small).free > _SPARE_BYTES + len(chunk):
            f.write(chunk)
            f.flush()
    return filler


def _scored(ctx: Context) -> float:
    return scrape(f"{ctx.stack.scorer_url}/metrics")["fairlane_scorer_gpu_samples_scored_total"]


def disk_full(ctx: Context) -> Row:
    row = Row("Kafka disk full under the scorer's changelogs")
    small = ctx.stack.small_log_dir
    if small is None:
        row.notes.append("not run: mounting the small filesystem needs root")
        return row
    before = ctx.loads()
    kafka_log = ctx.stack.tmp / f"kafka-{ctx.stack.ports.kafka}" / "kafka.log"
    log_start = kafka_log.stat().st_size
    filler = _fill(small)
    filled = time.monotonic()
    scorer = ctx.stack.services["scorer"]
    scored_at_fill = _scored(ctx)
    time.sleep(ctx.plan.outage_s)
    with kafka_log.open("rb") as f:
        f.seek(log_start)
        broker_said = f.read().decode(errors="replace")
    offline = "No space left on device" in broker_said or "offline" in broker_said.lower()
    if scorer.alive:
        try:
            progress = f"scored {_scored(ctx) - scored_at_fill:.0f} GPU samples meanwhile"
        except httpx.HTTPError as exc:
            progress = f"its /metrics did not answer ({type(exc).__name__})"
        behaviour = f"scorer kept running, {progress}"
    else:
        behaviour = f"scorer exited with {scorer.proc.returncode if scorer.proc else '?'}"
    filler.unlink()
    ctx.stack.kafka("down")
    ctx.stack.kafka("up")
    if not scorer.alive:
        scorer.start()
    healed = time.monotonic()
    row.injected = (
        f"changelogs on a {shutil.disk_usage(small).total >> 20} MiB tmpfs filled to "
        f"{_SPARE_BYTES >> 20} MiB free for "
        f"{healed - filled:.0f} s; then space freed and the broker restarted"
    )
    row.notes.append(
        f"broker {'took the full log dir offline' if offline else 'reported no failed dir'}; "
        + behaviour
    )
    ctx.finish(row, healed, before)
    return row
