"""Extender benchmark (not a test): filter + prioritize for 5,000 candidate nodes of a
100,000-GPU fleet (12,500 nodes of 8), as kube-scheduler calls them for every GPU pod.

1. In process: the filter's decision (core/extender.py) and the prioritize ranking of
   its survivors from it, as the routes do, on the live fleet view, with 500
   new score records applied between calls (a fleet that keeps changing, so nothing
   is served from a cache that real traffic would invalidate).
2. Over HTTP: the real routes under uvicorn on a loopback socket, the pod's JSON and
   5,000 names in the body, one keep-alive client.

Each figure is printed with the target (5 ms in process, 15 ms over HTTP) and as a
ratio to a reference measured in the same run on the same machine: the in-process
calls against parsing and writing their own bodies with orjson (the least any
implementation must do), the HTTP calls against an endpoint that only echoes the body.

    .venv/bin/python -m bench.extender [--calls 300] [--nodes 5000]
"""

from __future__ import annotations

import argparse
import threading
import time
from dataclasses import dataclass
from typing import Any

import httpx
import numpy as np
import orjson
import uvicorn
from fastapi import FastAPI, Request, Response

from fairlane_events.records import GpuScore
from fairlane_scheduler.api.extender import ExtenderState, router
from fairlane_scheduler.core.extender import judge_nodes
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.placement import JobShape, PlacementPolicy
from fairlane_scheduler.core.pod_ledger import PodLedger

GPUS_PER_NODE = 8
PORT = 28731  # loopback, below the ephemeral range
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
POD = {
    "metadata": {"name": "train-0", "namespace": "team", "uid": "bench"},
    "spec": {"containers": [{"name": "m", "resources": {"limits": {"nvidia.com/gpu": "2"}}}]},
}


def record(rng: np.random.Generator, i: int, ts_ms: int) -> GpuScore:
    score = float(rng.uniform(0.3, 1.0))
    return GpuScore(
        node=f"node-{i // GPUS_PER_NODE:05d}",
        uuid=f"GPU-{i:06d}",
        index=i % GPUS_PER_NODE,
        model=MODELS[(i // GPUS_PER_NODE) % 2],
        score=score,
        speed=2.0,
        effective_capacity=2 * score,
        components={},
        samples_in_window=5,
        stale=False,
        mem_total_bytes=80 * 1024**3,
        ts_ms=ts_ms,
    )


def percentile(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values) * 1000, p))


@dataclass
class _Live:  # what the routes read of the scheduler's runtime
    fleet: FleetView
    policy: PlacementPolicy
    live_gpus: Any


def in_process(fleet: FleetView, names: list[str], calls: int, now_ms: int) -> dict[str, float]:
    rng = np.random.default_rng(1)
    policy, summaries, ledger = PlacementPolicy(stale_after_s=1e9), NodeSummaries(), PodLedger()
    body = orjson.dumps({"Pod": POD, "NodeNames": names})
    timings, reference, cpu = [], [], []
    for c in range(calls):
        for i in rng.integers(0, len(fleet), 500):
            fleet.apply(record(rng, int(i), now_ms + c))
        start, cpu_start = time.perf_counter(), time.process_time()
        held = ledger.held(fleet.node_id, len(fleet.nodes), now_ms, exclude="bench")
        verdicts = judge_nodes(  # filter
            fleet,
            summaries,
            shape=JobShape(2),
            policy=policy,
            held=held,
            now_ms=now_ms + c,
            node_names=names,
        )
        passed = verdicts.passed()
        verdicts.failed()
        verdicts.unresolvable_nodes()
        verdicts.priorities(passed)  # prioritize: the survivors, ranked from the filter
        timings.append(time.perf_counter() - start)
        cpu.append(time.process_time() - cpu_start)
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
    }


def serve(fleet: FleetView, port: int) -> uvicorn.Server:
    app = FastAPI()
    app.include_router(router)
    app.state.runtime = _Live(
        fleet, PlacementPolicy(stale_after_s=1e9), type("L", (), {"current": frozenset()})
    )
    app.state.extender = ExtenderState()

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await request.body(), media_type="application/json")

    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    threading.Thread(target=server.run, daemon=True).start()
    while not server.started:
        time.sleep(0.05)
    return server


def over_http(fleet: FleetView, names: list[str], calls: int) -> dict[str, float]:
    server = serve(fleet, port=PORT)
    body = orjson.dumps({"Pod": POD, "NodeNames": names})
    headers = {"Content-Type": "application/json"}
    timings, reference = [], []
    with httpx.Client(base_url=f"http://127.0.0.1:{PORT}", headers=headers) as client:
        for _ in range(calls):
            start = time.perf_counter()
            assert client.post("/v1/extender/filter", content=body).status_code == 200
            assert client.post("/v1/extender/prioritize", content=body).status_code == 200
            timings.append(time.perf_counter() - start)
            start = time.perf_counter()
            client.post("/echo", content=body)
            client.post("/echo", content=body)
            reference.append(time.perf_counter() - start)
    server.should_exit = True
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
    args = parser.parse_args()
    rng, now_ms = np.random.default_rng(0), int(time.time() * 1000)
    fleet = FleetView(capacity=args.gpus)
    for i in range(args.gpus):
        fleet.apply(record(rng, i, now_ms))
    names = sorted(fleet.nodes)[: args.nodes]
    local = in_process(fleet, names, args.calls, now_ms)
    http = over_http(fleet, names, args.calls)
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
