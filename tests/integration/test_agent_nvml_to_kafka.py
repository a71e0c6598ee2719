"""The nvml backend end to end: the real agent (collector, delivery, publisher) on the
pynvml twin, into a real Kafka, read back from the topic."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from fairlane_agent.__main__ import run
from fairlane_agent.settings import AgentSettings
from fairlane_events.signing import (
    SIGNATURE_HEADER,
    NodeKey,
    parse_key_ring,
    read_key_file,
    verify,
)
from tests.fakes.nvml import FakeNvml, h100, t4
from tests.node_keys import TEST_KEY_RING
from tests.node_samples import node_samples_of, records_of

pytestmark = pytest.mark.integration


async def test_nvml_backend_publishes_what_the_gpus_report_signed_by_its_node(
    kafka_bootstrap: str, unique: str, tmp_path: Path
) -> None:
    node = f"gpu-node-{unique}"
    ring = read_key_file(TEST_KEY_RING, parse_key_ring)
    node_key = tmp_path / "node-key"
    node_key.write_text(
        NodeKey(ring.current, node, ring.node_key(node, ring.current) or b"").line()
    )
    lost = t4("GPU-t4-lost")
    nvml = FakeNvml([h100("GPU-h100-a"), lost])
    settings = AgentSettings(
        backend="nvml",
        node_name=node,
        interval_s=0.2,
        metrics_port=0,
        kafka_bootstrap_servers=kafka_bootstrap,
        node_key_file=node_key,
    )
    stop = asyncio.Event()
    agent = asyncio.create_task(run(settings, lambda: nvml, stop))
    (record,) = await records_of(kafka_bootstrap, [node], 1)
    verify(ring, record.key, record.value, dict(record.headers)[SIGNATURE_HEADER])
    first = await node_samples_of(kafka_bootstrap, [node], 1)
    lost.lost = True
    later = await node_samples_of(kafka_bootstrap, [node], 6)
    stop.set()
    await asyncio.wait_for(agent, 20)
    assert nvml.calls["nvmlShutdown"] == 1
    h100_sample, t4_sample = first[0].gpus
    assert first[0].source == "nvml"
    assert first[0].driver_version == "570.124.06"
    assert h100_sample.sm_active == pytest.approx(0.425)
    assert t4_sample.ecc_uncorrected_volatile is None
    assert t4_sample.healthy
    assert not later[-1].gpus[1].healthy
    assert later[-1].gpus[0].healthy
