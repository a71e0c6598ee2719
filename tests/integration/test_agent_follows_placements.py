"""Simulation closes the loop: a placement on the placements topic loads the simulated
GPU it names, in the records the agent publishes."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from fairlane_agent.__main__ import run
from fairlane_agent.settings import AgentSettings
from fairlane_events.codec import decode
from fairlane_events.records import NodeSample
from fairlane_sim.fleet import FleetSimulator
from tests.factories import single_gpu_placement
from tests.launcher_harness import publish_event
from tests.node_samples import samples_consumer

pytestmark = pytest.mark.integration


def now_ms() -> int:
    return int(time.time() * 1000)


async def utilisation_reaches(bootstrap: str, node: str, check: Callable[[float], bool]) -> None:
    async with samples_consumer(bootstrap, start="end") as consumer, asyncio.timeout(30):
        while True:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                for r in records:
                    if r.key == node.encode():
                        util = decode(NodeSample, r.value).gpus[0].gpu_util_pct or 0.0
                        if check(util):
                            return


async def test_a_placed_job_loads_its_simulated_gpu_until_released(
    kafka_bootstrap: str, unique: str
) -> None:
    settings = AgentSettings(
        backend="sim",
        nodes=1,
        gpus_per_node=2,
        degraded_fraction=0,
        seed=4,
        node_prefix=f"loop-{unique}",
        interval_s=0.2,
        metrics_port=0,
        kafka_bootstrap_servers=kafka_bootstrap,
    )
    node = f"loop-{unique}-0000"
    gpu = FleetSimulator(settings.fleet_spec()).gpus[node][0]  # same seed, same uuids
    stop = asyncio.Event()
    agent = asyncio.create_task(run(settings, lambda: None, stop))
    try:
        await utilisation_reaches(kafka_bootstrap, node, lambda u: u < 5)
        pid = f"p-{unique}"
        await publish_event(
            kafka_bootstrap, single_gpu_placement(node, gpu.uuid, "created", now_ms(), pid)
        )
        await utilisation_reaches(kafka_bootstrap, node, lambda u: u >= 92)
        await publish_event(
            kafka_bootstrap, single_gpu_placement(node, gpu.uuid, "released", now_ms(), pid)
        )
        await utilisation_reaches(kafka_bootstrap, node, lambda u: u < 5)
    finally:
        stop.set()
        await asyncio.wait_for(agent, 20)
