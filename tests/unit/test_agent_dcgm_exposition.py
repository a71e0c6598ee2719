"""Reading dcgm-exporter's exposition: labels, units, blanks and what is not exported
(pure core, on expositions in dcgm-exporter's format: tests/fixtures/dcgm/)."""

from __future__ import annotations

import pytest

from fairlane_agent.core.dcgm_exposition import (
    FIELD_SOURCES,
    MIB,
    DcgmGpu,
    is_dcgm_blank,
    read_exposition,
)
from fairlane_agent.errors import DcgmFormatError
from tests.fakes.dcgm_exporter import (
    DEFAULT_COUNTERS,
    FAIRLANE_COUNTERS_CSV,
    Counter,
    ExporterGpu,
    fixture_texts,
    h100_values,
    read_counters_csv,
    read_fixture,
    render,
)

IDLE_UUID = "GPU-5d3a0f4e-8a7b-4b0e-9c61-2f1d7e8a9b01"
BUSY_UUID = "GPU-b81c2d3e-4f5a-6b7c-8d9e-0a1b2c3d4e5f"
FAIRLANE = read_counters_csv(FAIRLANE_COUNTERS_CSV)
#: Fields dcgm-exporter's default counters do not export: null in the records.
NOT_IN_DEFAULTS = {
    "sm_active",
    "slowdown_temp_c",
    "power_limit_w",
    "max_sm_clock_mhz",
    "clock_event_reasons",
    "ecc_uncorrected_volatile",
    "remapped_rows_pending",
}


def read(text: str, default_node: str = "scrape-host") -> dict[str, DcgmGpu]:
    return {g.uuid: g for g in read_exposition(text, default_node)}


def one(
    gpu: ExporterGpu,
    counters: tuple[Counter, ...] = FAIRLANE,
    *,
    hostname: str | None = "gpu-node-1",
    uuid_label: str = "UUID",
) -> DcgmGpu:
    text = render([gpu], counters, hostname=hostname, uuid_label=uuid_label)
    (read_gpu,) = read_exposition(text, "scrape-host")
    return read_gpu


def test_the_fixtures_are_what_the_twin_renders() -> None:
    for name, text in fixture_texts().items():
        assert read_fixture(name) == text, f"tests/fixtures/dcgm/{name} drifted from the twin"


def test_default_counters_give_the_fields_they_carry_and_null_for_the_rest() -> None:
    gpus = read(read_fixture("default-counters-2xh100.prom"))
    idle, busy = gpus[IDLE_UUID], gpus[BUSY_UUID]
    assert (busy.node, busy.index, busy.model) == ("gpu-node-1", 1, "NVIDIA H100 80GB HBM3")
    assert busy.driver_version == "570.124.06"
    assert busy.metrics == {
        "gpu_util_pct": 97,
        "mem_util_pct": 41,
        "mem_used_bytes": 61440 * MIB,
        "mem_total_bytes": (61440 + 19564 + 555) * MIB,  # used + free + reserved
        "temp_c": 88,
        "power_w": pytest.approx(655.123),
        "sm_clock_mhz": 1410,
        "pcie_tx_bytes_per_s": 3_210_442,
        "pcie_rx_bytes_per_s": 9_876_543,
    }
    assert NOT_IN_DEFAULTS.isdisjoint(idle.metrics)
    assert idle.metrics["gpu_util_pct"] == 0  # a real 0 stays 0
    assert idle.unhealthy_because is None


def test_fairlane_counters_fill_every_field_with_the_idle_bit_masked() -> None:
    gpus = read(read_fixture("fairlane-counters-2xh100.prom"))
    idle, busy = gpus[IDLE_UUID], gpus[BUSY_UUID]
    assert busy.node == "gpu-node-1"  # from the lowercase `hostname` label
    assert set(busy.metrics) == set(FIELD_SOURCES) - {"healthy"}
    assert busy.metrics["mem_total_bytes"] == 81559 * MIB  # DCGM_FI_DEV_FB_TOTAL
    assert busy.metrics["sm_active"] == pytest.approx(0.912)
    assert (busy.metrics["slowdown_temp_c"], busy.metrics["max_sm_clock_mhz"]) == (90, 1980)
    assert busy.metrics["power_limit_w"] == 700.0
    assert busy.metrics["clock_event_reasons"] == 0x24  # SW thermal + SW power cap
    assert idle.metrics["clock_event_reasons"] == 0  # idle alone is not a slowdown
    assert (busy.metrics["ecc_uncorrected_volatile"], busy.metrics["remapped_rows_pending"]) == (
        0,
        False,
    )


def test_dcgm_blank_sentinels_are_null_not_numbers() -> None:
    # Older exporters printed DCGM's blanks; README's example has MEMORY_TEMP's.
    text = (
        "# HELP DCGM_FI_DEV_MEMORY_TEMP Memory temperature (in C).\n"
        "# TYPE DCGM_FI_DEV_MEMORY_TEMP gauge\n"
        'DCGM_FI_DEV_MEMORY_TEMP{gpu="0", UUID="GPU-604ac76c"} 9223372036854775794\n'
        'DCGM_FI_DEV_GPU_TEMP{gpu="0", UUID="GPU-604ac76c"} 2147483634\n'
        'DCGM_FI_DEV_POWER_USAGE{gpu="0", UUID="GPU-604ac76c"} 140737488355328.000000\n'
        'DCGM_FI_DEV_SM_CLOCK{gpu="0", UUID="GPU-604ac76c"} 139\n'
    )
    assert read(text)["GPU-604ac76c"].metrics == {"sm_clock_mhz": 139}


@pytest.mark.parametrize(
    ("value", "blank"),
    [
        (0, False),
        (2147483631, False),
        (0x7FFFFFF0, True),
        (0x7FFFFFF0 + 3, True),
        (2**47 - 1, False),
        (2**47, True),
        (float(0x7FFFFFFFFFFFFFF0), True),
    ],
)
def test_is_dcgm_blank(value: float, blank: bool) -> None:
    assert is_dcgm_blank(value) is blank


def test_series_without_hostname_belong_to_the_scrape_host() -> None:
    gpu = one(ExporterGpu(0, "GPU-a", values=h100_values()), hostname=None)
    assert gpu.node == "scrape-host"


def test_the_old_namespace_uuid_label_is_read() -> None:
    gpu = one(ExporterGpu(0, "GPU-a", values=h100_values()), uuid_label="uuid")
    assert gpu.uuid == "GPU-a"


def test_the_pre_dcgm_3_throttle_name_and_the_management_power_limit_are_read() -> None:
    values = h100_values(DCGM_FI_DEV_CLOCK_THROTTLE_REASONS=0x40 | 0x1)
    del values["DCGM_FI_DEV_CLOCKS_EVENT_REASONS"], values["DCGM_FI_DEV_ENFORCED_POWER_LIMIT"]
    values["DCGM_FI_DEV_POWER_MGMT_LIMIT"] = 650.0
    counters = (
        *FAIRLANE,
        Counter("DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "gauge", "Throttle reasons."),
        Counter("DCGM_FI_DEV_POWER_MGMT_LIMIT", "gauge", "Power management limit (in W)."),
    )
    gpu = one(ExporterGpu(0, "GPU-a", values=values), counters)
    assert (gpu.metrics["clock_event_reasons"], gpu.metrics["power_limit_w"]) == (0x40, 650.0)


def test_memory_total_is_null_unless_dcgm_gives_it_or_all_its_parts() -> None:
    values = h100_values()
    del values["DCGM_FI_DEV_FB_TOTAL"], values["DCGM_FI_DEV_FB_RESERVED"]
    gpu = one(ExporterGpu(0, "GPU-a", values=values))
    assert "mem_total_bytes" not in gpu.metrics
    assert gpu.metrics["mem_used_bytes"] == 0


def test_mig_instance_series_are_left_out() -> None:
    whole = ExporterGpu(0, "GPU-a", values=h100_values(DCGM_FI_DEV_GPU_UTIL=50))
    instance = ExporterGpu(
        0,
        "GPU-a",
        values={"DCGM_FI_DEV_GPU_UTIL": 99, "DCGM_FI_PROF_SM_ACTIVE": 0.99},
        labels={"GPU_I_PROFILE": "1g.10gb", "GPU_I_ID": "7"},
    )
    (gpu,) = read_exposition(render([whole, instance], FAIRLANE), "scrape-host")
    assert (gpu.metrics["gpu_util_pct"], gpu.metrics["sm_active"]) == (50, 0.0)


def test_per_pod_series_give_the_device_wide_value_else_the_largest() -> None:
    pods = [
        ExporterGpu(0, "GPU-a", values={"DCGM_FI_DEV_GPU_UTIL": u}, labels={"pod": p})
        for p, u in (("train-0", 30), ("train-1", 60))
    ]
    (gpu,) = read_exposition(render(pods, FAIRLANE), "scrape-host")
    assert gpu.metrics["gpu_util_pct"] == 60
    device = ExporterGpu(0, "GPU-a", values={"DCGM_FI_DEV_GPU_UTIL": 75})
    (gpu,) = read_exposition(render([*pods, device], FAIRLANE), "scrape-host")
    assert gpu.metrics["gpu_util_pct"] == 75


@pytest.mark.parametrize(
    ("values", "why"),
    [
        ({"DCGM_FI_DEV_XID_ERRORS": 0}, None),
        ({"DCGM_FI_DEV_XID_ERRORS": 13}, None),  # graphics engine exception: the app's
        ({"DCGM_FI_DEV_XID_ERRORS": 48}, "XID 48"),
        ({"DCGM_FI_DEV_XID_ERRORS": 79}, "XID 79"),
        ({"DCGM_FI_DEV_XID_ERRORS": 95}, "XID 95"),
        ({"DCGM_FI_DEV_ROW_REMAP_FAILURE": 1}, "row remapping failed"),
        ({"DCGM_FI_DEV_ROW_REMAP_PENDING": 1}, None),  # a pending remap is the score's gate
    ],
)
def test_lost_xids_and_failed_row_remaps_make_the_gpu_unhealthy(
    values: dict[str, int], why: str | None
) -> None:
    gpu = one(ExporterGpu(0, "GPU-a", values=h100_values(**values)))
    assert gpu.unhealthy_because == why


def test_series_that_are_not_a_whole_gpu_are_ignored() -> None:
    text = (
        'DCGM_FI_DEV_NVSWITCH_TEMPERATURE_CURRENT{nvswitch="0",Hostname="n"} 40\n'
        'DCGM_FI_DEV_NVLINK_BANDWIDTH_L0{nvlink="0",gpu="0",gpu_uuid="GPU-a",Hostname="n"} 9\n'
        'DCGM_FI_DEV_CPU_UTIL_TOTAL{cpu="0",Hostname="n"} 12\n'
        "go_goroutines 42\n"
    )
    assert read_exposition(text, "scrape-host") == []


def test_text_that_is_not_an_exposition_is_a_format_error() -> None:
    with pytest.raises(DcgmFormatError, match="not a Prometheus exposition"):
        read_exposition('DCGM_FI_DEV_GPU_UTIL{gpu="0" 5\n', "scrape-host")


def test_the_shipped_counters_file_asks_for_every_field_the_bridge_maps() -> None:
    names = {c.name for c in FAIRLANE}
    wanted = {name for sources in FIELD_SOURCES.values() for name in sources}
    # Older or alternative names the bridge also reads, not asked for by the file:
    alternatives = {"DCGM_FI_DEV_CLOCK_THROTTLE_REASONS", "DCGM_FI_DEV_POWER_MGMT_LIMIT"}
    assert wanted - alternatives <= names
    assert {c.name for c in DEFAULT_COUNTERS} <= names  # a superset of the defaults
    assert {c.prom_type for c in FAIRLANE} <= {"gauge", "counter", "label"}
