"""From scrapes to node samples: many nodes per bridge, GPUs that disappear, values the
record cannot hold (pure core)."""

from __future__ import annotations

from fairlane_agent.core.dcgm_bridge import DcgmBridge, gpu_sample
from fairlane_agent.core.dcgm_exposition import DcgmGpu, read_exposition
from fairlane_events.records import GpuSample, NodeSample
from tests.fakes.dcgm_exporter import ExporterGpu, h100_values, read_fixture, render

T0 = 1_700_000_000_000
URL_A, URL_B = "http://gpu-node-1:9400/metrics", "http://gpu-node-2:9400/metrics"


def node_gpus(node: str, *indices: int) -> list[DcgmGpu]:
    gpus = [ExporterGpu(i, f"GPU-{node}-{i}", values=h100_values()) for i in indices]
    return read_exposition(render(gpus, hostname=node), node)


def by_node(records: list[NodeSample]) -> dict[str, list[GpuSample]]:
    return {r.node: r.gpus for r in records}


def test_each_node_of_each_exporter_gets_one_record_of_source_dcgm() -> None:
    bridge = DcgmBridge()
    fixture = read_exposition(read_fixture("default-counters-2xh100.prom"), "x")
    first = bridge.node_samples(URL_A, fixture, T0)
    second = bridge.node_samples(URL_B, node_gpus("gpu-node-2", 0, 1, 2), T0)
    (a,), (b,) = first.records, second.records
    assert (a.node, a.source, a.ts_ms, a.driver_version) == ("gpu-node-1", "dcgm", T0, "570.124.06")
    assert [g.index for g in a.gpus] == [0, 1]
    assert [g.uuid for g in b.gpus] == ["GPU-gpu-node-2-0", "GPU-gpu-node-2-1", "GPU-gpu-node-2-2"]
    assert all(g.healthy for g in a.gpus + b.gpus)
    assert first.vanished == []
    assert first.problems == []


def test_one_exporter_can_show_several_nodes() -> None:
    bridge = DcgmBridge()
    done = bridge.node_samples(URL_A, node_gpus("n1", 0) + node_gpus("n2", 0, 1), T0)
    assert {n: len(g) for n, g in by_node(done.records).items()} == {"n1": 1, "n2": 2}


def test_a_gpu_that_disappears_is_unhealthy_until_it_is_back_and_said_once() -> None:
    bridge = DcgmBridge()
    bridge.node_samples(URL_A, node_gpus("n1", 0, 1), T0)
    gone = bridge.node_samples(URL_A, node_gpus("n1", 0), T0 + 1000)
    again = bridge.node_samples(URL_A, node_gpus("n1", 0), T0 + 2000)
    back = bridge.node_samples(URL_A, node_gpus("n1", 0, 1), T0 + 3000)
    assert gone.vanished == [("n1", "GPU-n1-1")]
    assert again.vanished == []
    lost = by_node(again.records)["n1"][1]
    assert (lost.uuid, lost.index, lost.model, lost.healthy) == (
        "GPU-n1-1",
        1,
        "NVIDIA H100 80GB HBM3",
        False,
    )
    assert lost.gpu_util_pct is None
    assert lost.temp_c is None
    assert back.returned == [("n1", "GPU-n1-1")]
    assert all(g.healthy for g in by_node(back.records)["n1"])


def test_a_node_whose_gpus_all_vanish_is_still_reported_every_gpu_unhealthy() -> None:
    bridge = DcgmBridge()
    bridge.node_samples(URL_A, node_gpus("n1", 0, 1), T0)
    done = bridge.node_samples(URL_A, [], T0 + 1000)
    (record,) = done.records
    assert record.driver_version == "570.124.06"  # remembered
    assert [g.healthy for g in record.gpus] == [False, False]


def test_nodes_are_remembered_per_exporter() -> None:
    bridge = DcgmBridge()
    bridge.node_samples(URL_A, node_gpus("n1", 0), T0)
    done = bridge.node_samples(URL_B, node_gpus("n2", 0), T0)
    assert [r.node for r in done.records] == ["n2"]  # n1 is URL_A's, not missing from B


def test_an_out_of_range_value_is_null_counted_and_said_once() -> None:
    hot = [ExporterGpu(0, "GPU-a", values=h100_values(DCGM_FI_DEV_GPU_TEMP=900))]
    gpus = read_exposition(render(hot, hostname="n1"), "n1")
    bridge = DcgmBridge()
    first = bridge.node_samples(URL_A, gpus, T0)
    second = bridge.node_samples(URL_A, gpus, T0 + 1000)
    (g,) = first.records[0].gpus
    assert g.temp_c is None
    assert g.sm_clock_mhz == 345
    assert first.dropped_fields == second.dropped_fields == ["temp_c"]
    assert first.problems == [
        "node n1 GPU GPU-a: temp_c outside the record's range, reported as null"
    ]
    assert second.problems == []


def test_memory_used_above_total_nulls_both() -> None:
    gpu = DcgmGpu("n1", "GPU-a", 0, "H100", {"mem_used_bytes": 10, "mem_total_bytes": 5})
    sample, dropped = gpu_sample(gpu)
    assert sample is not None
    assert (sample.mem_used_bytes, sample.mem_total_bytes) == (None, None)
    assert dropped == ["mem_used_bytes", "mem_total_bytes"]


def test_an_unhealthy_gpu_keeps_its_readings() -> None:
    xid = [ExporterGpu(0, "GPU-a", values=h100_values(DCGM_FI_DEV_XID_ERRORS=79))]
    done = DcgmBridge().node_samples(URL_A, read_exposition(render(xid), "n"), T0)
    (g,) = done.records[0].gpus
    assert (g.healthy, g.temp_c) == (False, 33)
    assert done.problems == ["node gpu-node-1 GPU GPU-a: XID 79; reported unhealthy"]


def test_a_node_name_the_record_cannot_hold_is_left_out_with_the_reason() -> None:
    gpus = read_exposition(
        render([ExporterGpu(0, "GPU-a", values=h100_values())], hostname="a b"), "x"
    )
    done = DcgmBridge().node_samples(URL_A, gpus, T0)
    assert done.records == []
    (problem,) = done.problems
    assert problem.startswith("node 'a b': no record (String should match pattern")


def test_a_gpu_whose_identity_does_not_fit_is_left_out_of_its_node() -> None:
    gpus = [*node_gpus("n1", 0), DcgmGpu("n1", "GPU-" + "x" * 100, 1, "H100", {})]
    done = DcgmBridge().node_samples(URL_A, gpus, T0)
    assert [g.index for g in done.records[0].gpus] == [0]
    assert done.problems == [
        f"node n1 GPU GPU-{'x' * 100}: identity does not fit the record; left out"
    ]
