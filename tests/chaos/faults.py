"""The faults of the servers and services: Kafka and Postgres stopped and restarted, the
scorer and a scheduler replica killed with SIGKILL, all under the placement load."""

from __future__ import annotations

import asyncio
import time

import httpx

from tests.chaos.audit import scrape
from tests.chaos.context import Context
from tests.chaos.parity import score_parity
from tests.chaos.report import Row
from tests.chaos.stack import MODELS

__all__ = ["kafka_outage", "postgres_outage", "replica_kill", "scorer_kill"]


def _agent_backlog(ctx: Context) -> int:
    backlog: int = httpx.get(f"{ctx.stack.agent_url}/healthz", timeout=3).json()["backlog"]
    return backlog


def kafka_outage(ctx: Context) -> Row:
    row = Row("Kafka broker stopped and restarted")
    before = ctx.loads()
    ctx.stack.kafka("down")
    stopped = time.monotonic()
    time.sleep(ctx.plan.outage_s)
    backlog = _agent_backlog(ctx)
    ctx.stack.kafka("up")
    up = time.monotonic()
    row.injected = f"broker down {up - stopped:.0f} s (SIGTERM), then up"
    row.notes.append(f"agent backlog at restart: {backlog} node samples")
    row.check(backlog > 0, "the agent buffered nothing while the broker was down")
    ctx.finish(row, up, before)
    return row


def scorer_kill(ctx: Context) -> Row:
    row = Row("Scorer kill -9 and restart")
    before = ctx.loads()
    scorer = ctx.stack.services["scorer"]
    killed_ms = int(time.time() * 1000)
    scorer.kill9()
    time.sleep(5)
    scorer.start()
    up = time.monotonic()
    row.injected = "SIGKILL to the scorer, restarted after 5 s"
    ctx.finish(row, up, before)
    # Every unplaced GPU emits at least once a heartbeat: wait for a round of them.
    unplaced = ctx.stack.nodes // len(MODELS) * ctx.stack.gpus_per_node
    checked, wrong = 0, list[str]()
    deadline = time.monotonic() + 4 * float(scorer.env["FAIRLANE_HEARTBEAT_S"]) + 60
    while checked < unplaced and not wrong and time.monotonic() < deadline:
        time.sleep(5)
        checked, wrong = asyncio.run(score_parity(ctx.stack, killed_ms))
    row.notes.append(f"{checked} scores since the kill equal the reference, {len(wrong)} differ")
    row.check(checked > 0, "no score records after the restart")
    row.check(not wrong, "scores differ from the reference: " + "; ".join(wrong[:3]))
    return row


def replica_kill(ctx: Context) -> Row:
    row = Row("Scheduler replica kill -9 (1 of 3)")
    before = ctx.loads()
    replica = ctx.stack.services["scheduler-1"]
    placed = ctx.load.ledger.snapshot()["POST 201"]
    # In the middle of placements: once the load has placed a few more since the start.
    while ctx.load.ledger.snapshot()["POST 201"] < placed + 3:
        time.sleep(0.2)
    replica.kill9()
    time.sleep(ctx.plan.outage_s / 3)
    replica.start()
    up = time.monotonic()
    row.injected = f"SIGKILL to replica 1 under load, restarted after {ctx.plan.outage_s / 3:.0f} s"
    ctx.finish(row, up, before)
    return row


def postgres_outage(ctx: Context) -> Row:
    row = Row("Postgres stopped and restarted")
    before = ctx.loads()
    sizes = ctx.log_sizes()
    failures_before = _dependency_failures(ctx)
    ctx.stack.postgres("down")
    stopped = time.monotonic()
    time.sleep(ctx.plan.outage_s)
    ctx.stack.postgres("up")
    up = time.monotonic()
    row.injected = f"Postgres down {up - stopped:.0f} s (fast shutdown), then up"
    ctx.finish(row, up, before)
    after = ctx.loads()
    answered_503 = sum(after[k] - before.get(k, 0) for k in after if k.endswith("503+retry-after"))
    bare = sum(after[k] - before.get(k, 0) for k in after if k.endswith("-bare"))
    server_errors = sum(
        after[k] - before.get(k, 0) for k in after if k.split()[1][:1] == "5" and "503" not in k
    )
    text = ctx.logged_since(sizes)
    lines = sum(t.count("\n") for t in text.values())
    tracebacks = sum(t.count("Traceback (most recent call last)") for t in text.values())
    failures = _dependency_failures(ctx) - failures_before
    row.notes.append(
        f"{answered_503} answers 503 + Retry-After; replicas logged {lines} lines, "
        f"{tracebacks} tracebacks; dependency-failure counter +{failures:.0f}"
    )
    row.check(answered_503 > 0, "no 503 + Retry-After while Postgres was down")
    row.check(bare == 0, f"{bare} answers 429/503 without Retry-After")
    row.check(server_errors == 0, f"{server_errors} other 5xx answers")
    row.check(tracebacks == 0, f"{tracebacks} tracebacks in the replicas' logs")
    return row


def _dependency_failures(ctx: Context) -> float:
    total = 0.0
    for replica in range(3):
        try:
            metrics = scrape(ctx.stack.api(replica) + "/metrics")
        except httpx.HTTPError:
            continue
        total += sum(
            v
            for k, v in metrics.items()
            if k.startswith("fairlane_scheduler_dependency_failures_total")
        )
    return total
