"""How many simulated nodes can one agent process publish at a 5 s interval?

    .venv/bin/python bench/agent_publish.py --bootstrap 127.0.0.1:29192 --nodes 2000 --rounds 5

Measured against a limit taken in the same run: a raw aiokafka producer with the same
settings (idempotent, acks=all, gzip, linger 20 ms) sending the same bytes (the encoded
records of the same rounds), keyed by node. The agent's path is the real one: the
simulator samples a round (pydantic records), the delivery loop takes batches from the
backlog and the SamplePublisher encodes and sends them, waiting for acknowledgements.

Prints nodes/s for both, nodes per 5 s interval, and the ratio agent / raw. Writes to
its own topic (created with the node-samples topic's partition count), never to
Fairlane's.
"""

from __future__ import annotations

import argparse
import asyncio
import time

from aiokafka import AIOKafkaProducer

from fairlane_agent.core.backlog import Backlog, BacklogLimits
from fairlane_agent.delivery import Delivery
from fairlane_agent.metrics import AgentMetrics
from fairlane_agent.publisher import SamplePublisher
from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.topics import STREAM_PARTITIONS, TopicSpec
from fairlane_runtime.kafka import ensure_topics
from fairlane_sim.fleet import FleetSimulator, FleetSpec

BENCH_TOPIC = "fairlane.bench.agent-publish"
INTERVAL_S = 5.0
T0 = 1_700_000_000_000


async def raw_rate(bootstrap: str, rounds: list[list[NodeSample]]) -> float:
    """Nodes/s of a bare producer sending the pre-encoded records of ``rounds``."""
    payloads = [[(s.node.encode(), encode(s), s.ts_ms) for s in r] for r in rounds]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **SamplePublisher.PRODUCER_CONFIG)
    await producer.start()
    try:
        started = time.perf_counter()
        for round_ in payloads:
            futures = [
                await producer.send(BENCH_TOPIC, value, key=key, timestamp_ms=ts)
                for key, value, ts in round_
            ]
            await asyncio.gather(*futures)
        elapsed = time.perf_counter() - started
    finally:
        await producer.stop()
    return sum(len(r) for r in rounds) / elapsed


async def agent_rate(bootstrap: str, spec: FleetSpec, rounds: int) -> tuple[float, float]:
    """Nodes/s of sample + deliver, and the share of that time spent sampling."""
    sim = FleetSimulator(spec)
    publisher = SamplePublisher(bootstrap, topic=BENCH_TOPIC)
    await publisher.start()
    metrics = AgentMetrics.create()
    delivery = Delivery(Backlog(BacklogLimits()), publisher, metrics, max_batch=spec.nodes)
    sampling = 0.0
    try:
        started = time.perf_counter()
        for i in range(rounds):
            t = time.perf_counter()
            ts = T0 + int(i * INTERVAL_S * 1000)
            samples = sim.sample(ts)
            sampling += time.perf_counter() - t
            delivery.add(samples, ts)
            await delivery.flush(deadline_s=60)
        elapsed = time.perf_counter() - started
    finally:
        await publisher.stop()
    return spec.nodes * rounds / elapsed, sampling / elapsed


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bootstrap", default="127.0.0.1:19092")
    parser.add_argument("--nodes", type=int, default=2000)
    parser.add_argument("--gpus-per-node", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    await ensure_topics(args.bootstrap, [TopicSpec(BENCH_TOPIC, STREAM_PARTITIONS)])
    spec = FleetSpec(nodes=args.nodes, gpus_per_node=args.gpus_per_node, seed=1)
    # Warm-up (connections, metadata), then the measured runs; same rounds for the raw path.
    await agent_rate(args.bootstrap, FleetSpec(nodes=50, seed=2), 1)
    agent, sampling_share = await agent_rate(args.bootstrap, spec, args.rounds)
    sim = FleetSimulator(spec)
    rounds = [sim.sample(T0 + int(i * INTERVAL_S * 1000)) for i in range(args.rounds)]
    raw = await raw_rate(args.bootstrap, rounds)
    size = sum(len(encode(s)) for s in rounds[0]) / len(rounds[0])
    print(f"fleet: {args.nodes} nodes x {args.gpus_per_node} GPUs, {args.rounds} rounds,")
    print(f"       {size:.0f} bytes per node record (JSON, before gzip)")
    print(f"raw aiokafka producer : {raw:8.0f} nodes/s = {raw * INTERVAL_S:8.0f} nodes per 5 s")
    print(f"agent (sim + deliver) : {agent:8.0f} nodes/s = {agent * INTERVAL_S:8.0f} nodes per 5 s")
    print(
        f"ratio agent / raw     : {agent / raw:.2f}  (sampling: {sampling_share:.0%} of agent time)"
    )


if __name__ == "__main__":
    asyncio.run(main())
