"""Kafka's disk full under the scorer's changelog topics, and what the scorer does.

The broker has a second log dir on a small tmpfs (stack.small_filesystem). The scenario
puts the scorer's changelog partitions there and every other partition on the main dir
(MoveToLogDir.java, Kafka's Admin API), fills the tmpfs to the last MiB and watches:
the broker takes the full dir offline, the changelogs lose their only replica. Healing
is what an operator does: free the space and restart the broker (an offline log dir
comes back only with a restart); a scorer that gave up is started again.
"""

from __future__ import annotations

import shutil
import subprocess
import time
from pathlib import Path

import httpx

from tests.chaos.audit import scrape
from tests.chaos.context import Context
from tests.chaos.report import Row
from tests.servers import server_script

__all__ = ["disk_full"]

_MOVER = Path(__file__).with_name("MoveToLogDir.java")
_SPARE_BYTES = 1 << 20


def _changelogs(ctx: Context) -> list[str]:
    app_id = ctx.stack.services["scorer"].env["FAIRLANE_APP_ID"]
    return [f"{app_id}-node-windows-changelog", f"{app_id}-node-allocations-changelog"]


def _place_partitions(ctx: Context, small: Path) -> str:
    stack = ctx.stack
    libs = server_script("kafka.sh", "libs", env=stack.kafka_env).strip().splitlines()[-1]
    main_dir = stack.tmp / f"kafka-{stack.ports.kafka}" / "data"
    args = [stack.bootstrap, str(small), str(main_dir), *_changelogs(ctx)]
    done = subprocess.run(
        ["java", "-cp", f"{libs}/*", str(_MOVER), *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    if done.returncode != 0:
        raise RuntimeError(f"MoveToLogDir.java failed: {done.stdout}{done.stderr[-2000:]}")
    return done.stdout.strip()


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
    row.notes.append(_place_partitions(ctx, small))
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
        f"changelogs on a 64 MiB tmpfs filled to {_SPARE_BYTES >> 20} MiB free for "
        f"{healed - filled:.0f} s; then space freed and the broker restarted"
    )
    row.notes.append(
        f"broker {'took the full log dir offline' if offline else 'reported no failed dir'}; "
        + behaviour
    )
    ctx.finish(row, healed, before)
    return row
