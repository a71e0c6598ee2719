"""The real NVML collection code against the pynvml twin (tests/fakes/nvml.py)."""

from __future__ import annotations

import logging

import pynvml
import pytest

from fairlane_agent.errors import NvmlUnavailableError
from fairlane_agent.nvml import NvmlCollector
from fairlane_events.records import GpuSample
from tests.fakes.nvml import MIB, FakeNvml, h100, t4, v100

T0 = 1_700_000_000_000


def collect(nvml: FakeNvml, rounds: int = 1) -> list[list[GpuSample]]:
    collector = NvmlCollector(nvml, "node-a")
    (first,) = collector.sample(T0)
    out = [first.gpus]
    out += [collector.sample(T0 + i * 1000)[0].gpus for i in range(1, rounds)]
    collector.close()
    return out


def test_v100_reports_every_metric_with_units_and_no_sm_activity() -> None:
    (gpus,) = collect(FakeNvml([v100()]))
    (g,) = gpus
    assert g.model == "Tesla V100-SXM2-32GB"
    assert g.uuid == "GPU-v100-0"
    assert g.healthy
    assert (g.gpu_util_pct, g.mem_util_pct) == (37.0, 12.0)
    assert (g.mem_used_bytes, g.mem_total_bytes) == (4096 * MIB, 32 * 1024 * MIB)
    assert (g.temp_c, g.slowdown_temp_c) == (55.0, 87.0)
    assert (g.power_w, g.power_limit_w) == (120.5, 300.0)  # milliwatts -> watts
    assert (g.sm_clock_mhz, g.max_sm_clock_mhz) == (1380.0, 1530.0)
    assert g.ecc_uncorrected_volatile == 0
    assert (g.pcie_tx_bytes_per_s, g.pcie_rx_bytes_per_s) == (2_000_000.0, 5_000_000.0)
    assert g.sm_active is None  # no GPM before Hopper
    assert g.remapped_rows_pending is None  # no row remapping before Ampere


def test_idle_bit_is_masked_out_of_clock_event_reasons() -> None:
    gpu = v100()
    gpu.clock_event_reasons = pynvml.nvmlClocksEventReasonGpuIdle | 0x40
    (gpus,) = collect(FakeNvml([gpu]))
    assert gpus[0].clock_event_reasons == 0x40


def test_h100_reports_gpm_sm_activity_as_a_fraction() -> None:
    gpu = h100()
    gpu.sm_util_pct = 80.0
    (gpus,) = collect(FakeNvml([gpu]))
    assert gpus[0].sm_active == pytest.approx(0.8)
    assert gpus[0].remapped_rows_pending is False


def test_h100_sm_activity_follows_the_device_between_rounds() -> None:
    gpu = h100()
    nvml = FakeNvml([gpu])
    collector = NvmlCollector(nvml, "node-a")
    seen = []
    for pct in (10.0, 55.0, 99.0):
        gpu.sm_util_pct = pct
        seen.append(collector.sample(T0)[0].gpus[0].sm_active)
    collector.close()
    assert seen == pytest.approx([0.10, 0.55, 0.99])
    assert nvml.calls["nvmlGpmSampleAlloc"] == nvml.calls["nvmlGpmSampleFree"] == 2


def test_t4_without_ecc_reports_null_not_zero() -> None:
    (gpus,) = collect(FakeNvml([t4()]))
    assert gpus[0].ecc_uncorrected_volatile is None
    assert gpus[0].healthy
    assert gpus[0].temp_c == 55.0


def test_unsupported_metric_is_probed_once_not_every_sample() -> None:
    nvml = FakeNvml([t4()])
    collect(nvml, rounds=5)
    assert nvml.calls["nvmlDeviceGetTotalEccErrors"] == 1
    assert nvml.calls["nvmlDeviceGetRemappedRows"] == 1
    assert nvml.calls["nvmlDeviceGetTemperature"] == 5


def test_gpu_lost_mid_run_is_unhealthy_while_the_others_go_on(
    caplog: pytest.LogCaptureFixture,
) -> None:
    lost, other = v100("GPU-lost"), h100("GPU-fine")
    nvml = FakeNvml([lost, other])
    errors: list[str] = []
    collector = NvmlCollector(nvml, "node-a", on_error=errors.append)
    assert all(g.healthy for g in collector.sample(T0)[0].gpus)
    lost.lost = True
    errors.clear()
    with caplog.at_level(logging.ERROR, logger="fairlane.agent.nvml"):
        rounds = [collector.sample(T0 + i)[0].gpus for i in range(1, 4)]
    for gone, fine in rounds:
        assert (gone.uuid, gone.healthy, gone.temp_c) == ("GPU-lost", False, None)
        assert fine.healthy
        assert fine.sm_active is not None
    assert errors == ["GpuIsLost"]  # and not asked again
    assert len([r for r in caplog.records if "GPU-lost" in r.getMessage()]) == 1


def test_driver_raising_unknown_errors_is_unhealthy_logged_once_and_retried(
    caplog: pytest.LogCaptureFixture,
) -> None:
    flaky = h100("GPU-flaky")
    errors: list[str] = []
    collector = NvmlCollector(FakeNvml([flaky, v100()]), "node-a", on_error=errors.append)
    flaky.failing = True
    with caplog.at_level(logging.ERROR, logger="fairlane.agent.nvml"):
        bad = [collector.sample(T0 + i)[0].gpus for i in range(3)]
    assert [r[0].healthy for r in bad] == [False] * 3
    assert all(r[1].healthy for r in bad)
    # Counted every time, logged once; the V100's missing features count once each.
    assert [e for e in errors if e != "NotSupported"] == ["Unknown"] * 3
    assert len(caplog.records) == 1
    flaky.failing = False
    assert collector.sample(T0 + 9)[0].gpus[0].healthy


def test_gpu_unreadable_at_start_is_reported_unhealthy() -> None:
    broken = v100()
    broken.lost = True
    (gpus,) = collect(FakeNvml([broken, t4()]))
    assert [g.healthy for g in gpus] == [False, True]
    assert gpus[0].uuid == "GPU-unreadable-0"


@pytest.mark.parametrize(
    ("code", "says"),
    [
        (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "NVML Shared Library Not Found"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "Driver Not Loaded"),
    ],
)
def test_nvml_init_failure_is_one_clear_error(code: int, says: str) -> None:
    with pytest.raises(NvmlUnavailableError, match=says):
        NvmlCollector(FakeNvml([v100()], init_error=code), "node-a")


def test_node_without_gpus_is_unavailable_and_shuts_nvml_down() -> None:
    nvml = FakeNvml([])
    with pytest.raises(NvmlUnavailableError, match="no GPU"):
        NvmlCollector(nvml, "node-a")
    assert nvml.calls["nvmlShutdown"] == 1


def test_record_is_an_nvml_node_sample_with_driver_version() -> None:
    collector = NvmlCollector(FakeNvml([v100(), h100()]), "node-a")
    (record,) = collector.sample(T0)
    assert (record.node, record.ts_ms, record.source) == ("node-a", T0, "nvml")
    assert record.driver_version == "570.124.06"
    assert [g.index for g in record.gpus] == [0, 1]
