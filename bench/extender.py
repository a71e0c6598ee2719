"""Extender benchmark (not a test): filter + prioritize for 5,000 candidate nodes of a
100,000-GPU fleet (12,500 nodes of 8), as kube-scheduler calls them for every GPU pod.

The fleet (bench/extender_fleet.py): ``--fleet realistic`` (default) is one in the
states a large fleet is in on an ordinary day (degraded, cooling, hot, stale, cordoned
and placement-held GPUs in stated proportions); ``--fleet meltdown`` is the worst case
measured before (half of every record below the threshold, cooling never ends).

Each call is one pod as kube-scheduler sends it: a new pod uid, the next 5,000 nodes of
the fleet from a rotating start (kube-scheduler's ``percentageOfNodesToScore`` walk),
the names decoded from JSON (fresh strings, as the route gets them); after prioritize
the pod is bound to its best node (the ``bindVerb``) and ends 100 calls later. Between
calls 500 score records and a few placement holds arrive (nothing is served from a
cache that live traffic would invalidate), outside the timing; then the node summaries
catch up on them, as the service's scores follower does after each batch of records
(kube/wiring.py), timed apart and printed.

1. In process: the filter's decision (core/extender.py) and the prioritize ranking of
   its survivors from it, as the routes do, on the live fleet view.
2. Over HTTP: the real routes under uvicorn in a process of their own (forked with the
   fleet), on a loopback socket, one keep-alive client: the pod's JSON and 5,000 names
   to filter, then the survivors to prioritize (as kube-scheduler sends them); the time
   between the two calls is the client's. Between pairs, untimed, the server binds the
   last pod and moves the fleet on.

Each figure is printed with the target (5 ms in process, 15 ms over HTTP) and as a
ratio to a reference measured in the same run on the same machine: the in-process
calls against parsing and writing their own bodies with orjson (the least any
implementation must do), the HTTP calls against an endpoint that only echoes the same
two bodies.

    .venv/bin/python -m bench.extender [--calls 300] [--nodes 5000] [--fleet realistic]
"""

from __future__ import annotations

import argparse
import contextlib
import multiprocessing
import time
from collections.abc import Iterator
from dataclasses import dataclass
from multiprocessing.process import BaseProcess
from typing import Any

import httpx
import numpy as np
import orjson
import uvicorn
from fastapi import FastAPI, Request, Response

from bench.extender_fleet import FLEETS, Traffic
from fairlane_scheduler.api.extender import ExtenderState, router
from fairlane_scheduler.clock import now_ms as wall_ms
from fairlane_scheduler.core.extender import judge_nodes
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy
from fairlane_scheduler.core.pod_ledger import PodGpus, PodLedger

RECORDS_BETWEEN_CALLS = 500
POD_LIFETIME_CALLS = 100  # a pod ends this many pods after it was bound
POLICY = PlacementPolicy()  # the service's defaults: threshold 0.65, stale after 180 s


def pod(c: int) -> dict[str, Any]:
    limits = {"nvidia.com/gpu": "2"}
    return {
        "metadata": {"name": f"train-{c}", "namespace": "team", "uid": f"bench-{c}"},
        "spec": {"containers": [{"name": "m", "resources": {"limits": limits}}]},
    }


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values) * 1000, p))


def candidates(nodes: list[str], count: int) -> Iterator[bytes]:
    """Each call's body: the next ``count`` nodes from where the last call stopped."""
    start, c = 0, 0
    while True:
        window = [nodes[(start + k) % len(nodes)] for k in range(count)]
        yield orjson.dumps({"Pod": pod(c), "NodeNames": window})
        start, c = (start + count) % len(nodes), c + 1


class Pods:
    """The pods bound so far: each bound to its best node, ended after a while."""

    def __init__(self, ledger: PodLedger) -> None:
        self.ledger = ledger
        self._bound: list[str] = []

    def bind(self, uid: str, names: list[str], scores: list[int]) -> None:
        if scores:
            self.ledger.bind(uid, names[int(np.argmax(scores))], PodGpus(2))
            self._bound.append(uid)
        if len(self._bound) > POD_LIFETIME_CALLS:
            self.ledger.release(self._bound.pop(0))


@dataclass
class _Live:  # what the routes read of the scheduler's runtime
    fleet: FleetView
    policy: PlacementPolicy
    live_gpus: Any


def in_process(
    fleet: FleetView, traffic: Traffic, nodes: list[str], args: argparse.Namespace, now_ms: int
) -> dict[str, float]:
    summaries, ledger = NodeSummaries(), PodLedger()
    pods, bodies = Pods(ledger), candidates(nodes, args.nodes)
    timings, reference, cpu, failed, catch_up = [], [], [], [], []
    for _ in range(args.calls):
        now_ms += traffic.ms_per_call(RECORDS_BETWEEN_CALLS)
        traffic.step(fleet, RECORDS_BETWEEN_CALLS, now_ms)
        start = time.perf_counter()
        summaries.refresh(fleet, POLICY, now_ms)  # as the scores follower does per batch
        catch_up.append(time.perf_counter() - start)
        traffic.placements(fleet)  # not caught up: the filter's own refresh takes these
        body = next(bodies)
        call = orjson.loads(body)  # fresh strings, as the route gets them
        uid, names = call["Pod"]["metadata"]["uid"], call["NodeNames"]
        start, cpu_start = time.perf_counter(), time.process_time()
        held = ledger.held(fleet.node_id, len(fleet.nodes), now_ms, exclude=uid)
        verdicts = judge_nodes(  # filter
            fleet,
            summaries,
            shape=JobShape(2),
            policy=POLICY,
            held=held,
            now_ms=now_ms,
            node_names=names,
        )
        passed = verdicts.passed()
        verdicts.failed()
        verdicts.unresolvable_nodes()
        scores = verdicts.priorities(passed)  # prioritize: the survivors, ranked from the filter
        timings.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
        failed.append(len(names) - len(passed))
        pods.bind(uid, passed, scores)
        start = time.perf_counter()
        for _ in ("filter", "prioritize"):
            orjson.dumps({"NodeNames": orjson.loads(body)["NodeNames"], "FailedNodes": {}})
        reference.append(time.perf_counter() - start)
    return {
        "p50": percentile(timings, 50),
        "p99": percentile(timings, 99),
        "ref_p99": percentile(reference, 99),
        "cpu_p50": percentile(cpu, 50),
        "cpu_p99": percentile(cpu, 99),
        "catch_up_p50": percentile(catch_up, 50),
        "catch_up_p99": percentile(catch_up, 99),
        "failed_min": min(failed),
        "failed_max": max(failed),
    }


def serve(fleet: FleetView, traffic: Traffic, port: int) -> None:
    """The routes under uvicorn, in this (forked) process; ``/bench/advance``, called
    between timed calls, binds the last call's pod and moves the fleet on, as the
    scores follower and kube-scheduler's bindings would."""
    app = FastAPI()
    app.include_router(router)
    app.state.runtime = _Live(fleet, POLICY, type("L", (), {"current": frozenset()}))
    app.state.extender = state = ExtenderState()
    pods = Pods(state.ledger)

    @app.post("/bench/advance")
    async def advance(request: Request) -> Response:
        last = orjson.loads(await request.body())
        if last:
            pods.bind(last["uid"], last["names"], last["scores"])
        now_ms = wall_ms()  # the routes' own clock is the wall clock
        traffic.step(fleet, RECORDS_BETWEEN_CALLS, now_ms)
        state.summaries.refresh(fleet, POLICY, now_ms)  # the follower's catch-up
        traffic.placements(fleet)
        return Response(b"{}", media_type="application/json")

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")


def _wait_until_served(client: httpx.Client, server: BaseProcess) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and server.is_alive():
        with contextlib.suppress(httpx.TransportError):
            client.post("/echo", content=b"{}")
            return
        time.sleep(0.1)
    raise RuntimeError("the extender's server did not start")


def over_http(
    fleet: FleetView, traffic: Traffic, nodes: list[str], args: argparse.Namespace
) -> dict[str, float]:
    """The server runs in a process of its own, as it does beside kube-scheduler: in a
    thread of the client's process the two would take turns on one interpreter lock."""
    server = multiprocessing.get_context("fork").Process(
        target=serve, args=(fleet, traffic, args.port), daemon=True
    )
    server.start()
    bodies = candidates(nodes, args.nodes)
    headers = {"Content-Type": "application/json"}
    timings, reference = [], []
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{args.port}", headers=headers) as client:
            _wait_until_served(client, server)
            last: dict[str, Any] = {}
            for _ in range(args.calls):
                client.post("/bench/advance", content=orjson.dumps(last))
                body = next(bodies)
                start = time.perf_counter()
                filtered = client.post("/v1/extender/filter", content=body)
                took = time.perf_counter() - start
                passed = orjson.loads(filtered.content)["NodeNames"]
                call = orjson.loads(body)
                survivors = orjson.dumps({"Pod": call["Pod"], "NodeNames": passed})
                start = time.perf_counter()
                ranked = client.post("/v1/extender/prioritize", content=survivors)
                timings.append(took + time.perf_counter() - start)
                assert filtered.status_code == ranked.status_code == 200
                scores = [h["Score"] for h in orjson.loads(ranked.content)]
                last = {"uid": call["Pod"]["metadata"]["uid"], "names": passed, "scores": scores}
                start = time.perf_counter()
                client.post("/echo", content=body)
                client.post("/echo", content=survivors)
                reference.append(time.perf_counter() - start)
    finally:
        server.terminate()
        server.join()
    return {
        "p50": percentile(timings, 50),
        "p99": percentile(timings, 99),
        "ref_p99": percentile(reference, 99),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=100_000)
    parser.add_argument("--nodes", type=int, default=5000, help="candidates per call")
    parser.add_argument("--calls", type=int, default=300)
    parser.add_argument("--fleet", choices=FLEETS, default="realistic")
    parser.add_argument("--port", type=int, default=28731, help="loopback, for the HTTP part")
    args = parser.parse_args()
    now_ms = int(time.time() * 1000)
    traffic = Traffic(args.fleet, args.gpus, np.random.default_rng(0))
    fleet = FleetView(capacity=args.gpus)
    traffic.load(fleet, now_ms)
    nodes = list(fleet.nodes)
    local = in_process(fleet, traffic, nodes, args, now_ms)
    http = over_http(fleet, traffic, nodes, args)
    print(
        f"{args.fleet} fleet: {local['failed_min']:.0f}-{local['failed_max']:.0f} of "
        f"{args.nodes} candidates failed per call (in process); the summaries' catch-up "
        f"after each {RECORDS_BETWEEN_CALLS} records (the follower's, not timed in the "
        f"calls): p50 {local['catch_up_p50']:.2f} ms, p99 {local['catch_up_p99']:.2f} ms"
    )
    for label, r, target in (("in process", local, 5.0), ("over HTTP", http, 15.0)):
        print(
            f"extender filter+prioritize, {args.nodes} nodes of a {args.gpus:,}-GPU fleet, "
            f"{label}: p50 {r['p50']:.2f} ms, p99 {r['p99']:.2f} ms "
            f"(target {target:.0f} ms: {r['p99'] / target:.2f}x; "
            f"{r['p99'] / r['ref_p99']:.1f}x the reference's p99 {r['ref_p99']:.2f} ms)"
            + (
                f"; CPU time p50 {r['cpu_p50']:.2f} ms, p99 {r['cpu_p99']:.2f} ms"
                if "cpu_p50" in r
                else ""
            )
        )


if __name__ == "__main__":
    main()
