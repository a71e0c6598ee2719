"""The dcgm backend end to end: the real agent (bridge, delivery, publisher) scraping two
dcgm-exporters over HTTP, one of which goes down, into a real Kafka, read back."""

from __future__ import annotations

import asyncio

import pytest

from fairlane_agent.__main__ import run
from fairlane_agent.settings import AgentSettings
from tests.fakes.dcgm_exporter import ExporterGpu, fixture_gpus, h100_values, render, serve
from tests.fakes.nvml import FakeNvml
from tests.node_samples import node_samples_of

pytestmark = pytest.mark.integration


async def test_dcgm_backend_publishes_every_exporters_nodes_through_an_outage(
    kafka_bootstrap: str, unique: str
) -> None:
    one, two = f"dcgm-a-{unique}", f"dcgm-b-{unique}"
    other = [ExporterGpu(0, f"GPU-{unique}-b0", values=h100_values())]
    with serve(render(fixture_gpus(), hostname=one)) as a, serve(render(other, hostname=two)) as b:
        settings = AgentSettings(
            backend="dcgm",
            dcgm_url=[a.url, b.url],
            dcgm_timeout_s=0.5,
            interval_s=0.5,
            metrics_port=0,
            kafka_bootstrap_servers=kafka_bootstrap,
        )
        nvml = FakeNvml([])
        stop = asyncio.Event()
        agent = asyncio.create_task(run(settings, lambda: nvml, stop))
        first = await node_samples_of(kafka_bootstrap, {one, two}, 2)
        b.stop()
        scrapes = a.scrapes
        while a.scrapes < scrapes + 3:  # three rounds with exporter b down
            await asyncio.sleep(0.2)
        stop.set()
        await asyncio.wait_for(agent, 20)
    assert {r.node for r in first} == {one, two}
    assert {r.source for r in first} == {"dcgm"}
    assert not nvml.calls
    everything = await node_samples_of(kafka_bootstrap, {one, two}, a.scrapes + 1)
    assert sum(r.node == one for r in everything) >= scrapes + 3  # node a kept publishing
    record_a = next(r for r in first if r.node == one)
    assert record_a.driver_version == "570.124.06"
    assert [g.gpu_util_pct for g in record_a.gpus] == [0, 97]
