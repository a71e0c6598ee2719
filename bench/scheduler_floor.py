"""How fast the scheduler could place with a decision that costs nothing (not a test).

The in-process placement benchmark (bench/scheduler_place.py) at one fleet size, twice
per run, interleaved: once as it serves, once with ``decide`` replaced by a round robin
over the fleet's nodes (the first free GPUs of the next node that has enough, its free
MASTER_PORT, the placement assembled as usual). Everything else is the scheduler's own:
the route, the ledger's reservation, the group commit to Postgres, the release, the
answer. The second figure bounds what any work on the decision can gain: with the same
harness, framework and writes, no decision makes the scheduler faster than that.

    python -m bench.scheduler_floor --gpus 1000 --runs 3

Run it against a broker and a durable Postgres of its own (``scripts/bench.sh floor``).
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import logging
from collections.abc import Iterator
from unittest import mock

import uvloop

import fairlane_scheduler.service as service_module
from bench.scheduler_place import pgbench_tps, run_size, trivial_ceiling
from fairlane_runtime.kafka import ensure_topics
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.ledger import Ledger
from fairlane_scheduler.core.master_port import PortRange, next_free_port
from fairlane_scheduler.core.placement import Choice, NodeChoice
from fairlane_scheduler.core.placements import Placement, PlacementRequest, assemble
from fairlane_scheduler.errors import NoCapacityError


class RoundRobin:
    """A decision of (almost) no cost: the next node in turn with enough free GPUs."""

    def __init__(self) -> None:
        self._nodes: list[tuple[str, list[int]]] = []
        self._turn: Iterator[int] = iter(())

    def __call__(
        self,
        request: PlacementRequest,
        *,
        fleet: FleetView,
        ledger: Ledger,
        ports: PortRange,
        placement_id: str,
        now_ms: int,
        **_others: object,
    ) -> Placement:
        if len(self._nodes) != len(fleet.nodes):  # the fleet as it is at the first call
            rows: dict[int, list[int]] = {}
            for row in range(len(fleet)):
                rows.setdefault(int(fleet.node[row]), []).append(row)
            self._nodes = [
                (fleet.nodes[node], rows.get(node, [])) for node in range(len(fleet.nodes))
            ]
            self._turn = itertools.cycle(range(len(self._nodes)))
        wanted = request.gpus_per_node
        for _ in range(len(self._nodes)):
            name, rows_of_node = self._nodes[next(self._turn)]
            free = [row for row in rows_of_node if not fleet.held[row]]
            port = next_free_port(ledger.ports(name), ports)
            if len(free) >= wanted and port is not None:
                choice = Choice((NodeChoice(name, tuple(free[:wanted])),), 1.0)
                return assemble(
                    request, fleet, choice, port=port, placement_id=placement_id, now_ms=now_ms
                )
        raise NoCapacityError("no node has the GPUs free", {})


def free_decision() -> contextlib.AbstractContextManager[object]:
    """The service deciding by :class:`RoundRobin` while it lasts."""
    return mock.patch.object(service_module, "decide", RoundRobin())


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--bootstrap", default="127.0.0.1:29396")
    parser.add_argument("--database-url", default="postgresql://postgres@127.0.0.1:25637/fairlane")
    parser.add_argument("--gpus", type=int, default=1000)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument("--runs", type=int, default=3, help="interleaved pairs")
    args = parser.parse_args()
    args.extender_calls, args.profile, args.client = 0, None, "httpx"  # run_size reads them
    logging.basicConfig(level=logging.ERROR)
    await ensure_topics(args.bootstrap)
    commit_tps = pgbench_tps(args.database_url, args.clients, int(args.seconds))
    print(f"pgbench simple-update, {args.clients} clients: {commit_tps:,.0f} commits/s (durable)")
    for run in range(1, args.runs + 1):
        for label, patched in (
            ("as it serves", contextlib.nullcontext()),
            ("free decision", free_decision()),
        ):
            ceiling = await trivial_ceiling(args)
            with patched:
                r = await run_size(args, args.gpus)
            rate, trivial = r["placements_per_s"], ceiling["placements_per_s"]
            print(
                f"run {run}, {args.gpus:,} GPUs, {label:>13}: {rate:7.1f} placements/s "
                f"({rate / trivial:.2f} x trivial of {trivial:,.0f}, "
                f"{rate / commit_tps:.3f} x pgbench), p99 {r['p99_ms']:.1f} ms, "
                f"CPU {r['cpu_ms_per_pair']:.2f} ms per pair (trivial "
                f"{ceiling['cpu_ms_per_pair']:.2f}; Postgres "
                f"{r.get('pg_cpu_ms_per_pair', float('nan')):.2f}), conflicts {r['conflicts']:.0f}",
                flush=True,
            )


if __name__ == "__main__":
    uvloop.run(main())
