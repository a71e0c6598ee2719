"""The scenarios in order of value, each bounded in time, and the run that strings them
together on one stack under one steady placement load."""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from pathlib import Path

from tests.chaos.bodies import huge_body, huge_body_with_token, slow_bodies
from tests.chaos.context import Context, Plan
from tests.chaos.disk import disk_full
from tests.chaos.faults import kafka_outage, postgres_outage, replica_kill, scorer_kill
from tests.chaos.hostile import hostile_input
from tests.chaos.load import LoadDriver
from tests.chaos.partition import agent_partition
from tests.chaos.report import Row
from tests.chaos.stack import ChaosPorts, chaos_stack
from tests.chaos.sustained import sustained_load
from tests.chaos.telemetry_rows import flood, forged_node, replay, uuid_collision

__all__ = ["SCENARIOS", "run_suite"]

Scenario = Callable[[Context], Row]

SCENARIOS: dict[str, Scenario] = {
    "kafka": kafka_outage,
    "scorer": scorer_kill,
    "replica": replica_kill,
    "postgres": postgres_outage,
    "hostile": hostile_input,
    "forged_node": forged_node,
    "uuid_collision": uuid_collision,
    "replay": replay,
    "flood": flood,
    "big_body": huge_body,
    "big_body_token": huge_body_with_token,
    "slow_body": slow_bodies,
    "sustained": sustained_load,
    "partition": agent_partition,
    "disk": disk_full,
}

#: The fleet: a few hundred simulated GPUs, one sample per node every 2 s.
NODES, GPUS_PER_NODE, INTERVAL_S = 32, 8, 2.0


def run_suite(
    plan: Plan,
    tmp: Path,
    names: list[str] | None = None,
    say: Callable[[str], None] = print,
) -> list[Row]:
    """Start the stack, hold the load, run the scenarios; one row each. A scenario that
    raises gets a failed row and the next one still runs."""
    rows: list[Row] = []
    ports = ChaosPorts.from_env()
    started = time.monotonic()
    nodes = f"{NODES} nodes x {GPUS_PER_NODE} GPUs"
    say(f"chaos: starting the stack ({nodes}) on Kafka {ports.kafka}, Postgres {ports.postgres}")
    with chaos_stack(
        ports, tmp, nodes=NODES, gpus_per_node=GPUS_PER_NODE, interval_s=INTERVAL_S
    ) as stack:
        say(f"chaos: stack ready after {time.monotonic() - started:.0f} s; load on")
        with LoadDriver(stack, rate_per_s=4, live_target=30) as load:
            ctx = Context(stack, load, plan)
            time.sleep(10)  # the load reaches its steady state
            for name in names or plan.order:
                say(f"chaos: {name} ...")
                begun = time.monotonic()
                try:
                    row = SCENARIOS[name](ctx)
                except Exception as exc:  # noqa: BLE001 - the run reports it and goes on
                    row = Row(name, failures=[f"raised {exc!r}"])
                    say(traceback.format_exc())
                row.notes.append(f"took {time.monotonic() - begun:.0f} s")
                say(f"chaos: {name}: {'ok' if row.ok else 'FAIL ' + '; '.join(row.failures)}")
                rows.append(row)
    return rows
