"""What the agent publishes validates against the checked-in node-samples JSON Schema:
NVML records (on the pynvml twin), DCGM-bridge records (on dcgm-exporter expositions)
and every shipped scenario's simulated records."""

from __future__ import annotations

import json

import jsonschema
import orjson
import pytest

from fairlane_agent.core.dcgm_bridge import DcgmBridge
from fairlane_agent.core.dcgm_exposition import read_exposition
from fairlane_agent.nvml import NvmlCollector
from fairlane_events.codec import encode
from fairlane_events.records import NodeSample
from fairlane_events.schemas import schema_path
from fairlane_events.topics import NODE_SAMPLES
from fairlane_sim.fleet import FleetSimulator, FleetSpec
from fairlane_sim.scenario import SHIPPED, shipped_scenario
from tests.fakes.dcgm_exporter import ExporterGpu, fixture_gpus, h100_values, read_fixture, render
from tests.fakes.nvml import FakeNvml, h100, t4, v100

T0 = 1_700_000_000_000


@pytest.fixture(scope="module")
def validator() -> jsonschema.Draft202012Validator:
    schema = json.loads(schema_path(NODE_SAMPLES).read_text())
    return jsonschema.Draft202012Validator(schema)


def assert_valid(validator: jsonschema.Draft202012Validator, records: list[NodeSample]) -> None:
    for record in records:
        validator.validate(orjson.loads(encode(record)))


def test_nvml_records_match_the_schema(validator: jsonschema.Draft202012Validator) -> None:
    lost = t4()
    collector = NvmlCollector(FakeNvml([v100(), h100(), lost]), "node-a")
    assert_valid(validator, collector.sample(T0))
    lost.lost = True
    assert_valid(validator, collector.sample(T0 + 1))


@pytest.mark.parametrize(
    "fixture", ["default-counters-2xh100.prom", "fairlane-counters-2xh100.prom"]
)
def test_dcgm_bridge_records_match_the_schema(
    fixture: str, validator: jsonschema.Draft202012Validator
) -> None:
    bridge, url = DcgmBridge(), "http://gpu-node-1:9400/metrics"
    assert_valid(
        validator, bridge.node_samples(url, read_exposition(read_fixture(fixture), "h"), T0).records
    )
    # GPU 1 disappears, GPU 0 reports an XID that takes it out of service
    xid = ExporterGpu(0, fixture_gpus()[0].uuid, values=h100_values(DCGM_FI_DEV_XID_ERRORS=79))
    later = bridge.node_samples(url, read_exposition(render([xid]), "h"), T0 + 1000).records
    assert [g.healthy for g in later[0].gpus] == [False, False]
    assert_valid(validator, later)


@pytest.mark.parametrize("name", SHIPPED)
def test_simulated_records_match_the_schema(
    name: str, validator: jsonschema.Draft202012Validator
) -> None:
    scenario = shipped_scenario(name)
    spec = FleetSpec(nodes=4, models=("T4", "V100", "A100-80GB", "H200"), seed=3)
    sim = FleetSimulator(spec, scenario)
    for s in range(0, 1200, 60):
        assert_valid(validator, sim.sample(T0 + s * 1000))
