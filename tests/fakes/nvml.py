"""A twin of the ``pynvml`` module for tests: the only faked boundary in Fairlane.

It exposes the functions, constants and error classes the agent's collector uses, with
the real signatures and units (milliwatts, KB/s, bytes). The error classes and constants
are the real ones from nvidia-ml-py (importing pynvml loads no driver), so ``except
nvml.NVMLError_NotSupported`` means the same thing here as on a node.

Each :class:`FakeGpu` plays one device; flip ``lost`` or ``failing`` between rounds to
play a GPU falling off the bus or a driver returning unknown errors.
"""

# The names mirror pynvml's own (nvmlDeviceGetName, c_nvmlGpmMetricsGet_t).
# ruff: noqa: N802, N815

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pynvml

MIB = 1024**2

#: What each kind of GPU does not support (NVML raises NotSupported for these).
V100_UNSUPPORTED = frozenset({"gpm", "remapped_rows"})  # Volta: no GPM, no row remapping
T4_UNSUPPORTED = frozenset({"gpm", "remapped_rows", "ecc"})  # ECC off (common on T4 clouds)
H100_UNSUPPORTED: frozenset[str] = frozenset()


@dataclass
class FakeGpu:
    name: str
    uuid: str
    unsupported: frozenset[str]
    mem_total_mib: int
    max_sm_clock_mhz: int = 1530
    slowdown_temp_c: int = 87
    power_limit_mw: int = 300_000
    gpu_util: int = 37
    mem_util: int = 12
    mem_used_mib: int = 4096
    temp_c: int = 55
    power_mw: int = 120_500
    sm_clock_mhz: int = 1380
    clock_event_reasons: int = pynvml.nvmlClocksEventReasonGpuIdle
    ecc_uncorrected: int = 0
    rows_pending: int = 0
    pcie_tx_kbs: int = 2_000
    pcie_rx_kbs: int = 5_000
    sm_util_pct: float = 42.5
    lost: bool = False
    failing: bool = False


def v100(uuid: str = "GPU-v100-0") -> FakeGpu:
    return FakeGpu("Tesla V100-SXM2-32GB", uuid, V100_UNSUPPORTED, 32 * 1024)


def h100(uuid: str = "GPU-h100-0") -> FakeGpu:
    return FakeGpu(
        "NVIDIA H100 80GB HBM3",
        uuid,
        H100_UNSUPPORTED,
        80 * 1024,
        max_sm_clock_mhz=1980,
        slowdown_temp_c=90,
        power_limit_mw=700_000,
    )


def t4(uuid: str = "GPU-t4-0") -> FakeGpu:
    return FakeGpu(
        "Tesla T4",
        uuid,
        T4_UNSUPPORTED,
        16 * 1024,
        max_sm_clock_mhz=1590,
        slowdown_temp_c=90,
        power_limit_mw=70_000,
    )


class _GpmSample:
    """An opaque GPM sample holding the device's counter when taken."""

    sm_util_pct: float | None = None


class _GpmMetricsGet:
    """Shape of ``c_nvmlGpmMetricsGet_t`` for what the agent fills in and reads."""

    def __init__(self) -> None:
        self.version = 0
        self.numMetrics = 0
        self.sample1: _GpmSample | None = None
        self.sample2: _GpmSample | None = None
        self.metrics = [SimpleNamespace(metricId=0, nvmlReturn=-1, value=0.0) for _ in range(8)]


@dataclass
class FakeNvml:
    """Stands in for the ``pynvml`` module. ``calls`` counts every NVML function called."""

    gpus: list[FakeGpu]
    init_error: int | None = None  # an NVML_ERROR_* code nvmlInit raises
    driver_version: str = "570.124.06"
    calls: Counter[str] = field(default_factory=Counter)

    # The real constants and error classes.
    NVMLError = pynvml.NVMLError
    NVMLError_NotSupported = pynvml.NVMLError_NotSupported
    NVMLError_GpuIsLost = pynvml.NVMLError_GpuIsLost
    NVML_SUCCESS = pynvml.NVML_SUCCESS
    NVML_TEMPERATURE_GPU = pynvml.NVML_TEMPERATURE_GPU
    NVML_TEMPERATURE_THRESHOLD_SLOWDOWN = pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    NVML_CLOCK_SM = pynvml.NVML_CLOCK_SM
    NVML_MEMORY_ERROR_TYPE_UNCORRECTED = pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    NVML_VOLATILE_ECC = pynvml.NVML_VOLATILE_ECC
    NVML_PCIE_UTIL_TX_BYTES = pynvml.NVML_PCIE_UTIL_TX_BYTES
    NVML_PCIE_UTIL_RX_BYTES = pynvml.NVML_PCIE_UTIL_RX_BYTES
    NVML_GPM_METRICS_GET_VERSION = pynvml.NVML_GPM_METRICS_GET_VERSION
    NVML_GPM_METRIC_SM_UTIL = pynvml.NVML_GPM_METRIC_SM_UTIL
    nvmlClocksEventReasonGpuIdle = pynvml.nvmlClocksEventReasonGpuIdle
    c_nvmlGpmMetricsGet_t = _GpmMetricsGet

    def _device(self, handle: FakeGpu, call: str, feature: str | None = None) -> FakeGpu:
        self.calls[call] += 1
        if handle.lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        if handle.failing:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        if feature is not None and feature in handle.unsupported:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return handle

    def nvmlInit(self) -> None:
        self.calls["nvmlInit"] += 1
        if self.init_error is not None:
            raise pynvml.NVMLError(self.init_error)

    def nvmlShutdown(self) -> None:
        self.calls["nvmlShutdown"] += 1

    def nvmlSystemGetDriverVersion(self) -> str:
        return self.driver_version

    def nvmlDeviceGetCount(self) -> int:
        return len(self.gpus)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> FakeGpu:
        return self._device(self.gpus[index], "nvmlDeviceGetHandleByIndex")

    def nvmlDeviceGetUUID(self, h: FakeGpu) -> str:
        return self._device(h, "nvmlDeviceGetUUID").uuid

    def nvmlDeviceGetName(self, h: FakeGpu) -> str:
        return self._device(h, "nvmlDeviceGetName").name

    def nvmlDeviceGetUtilizationRates(self, h: FakeGpu) -> Any:
        g = self._device(h, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(gpu=g.gpu_util, memory=g.mem_util)

    def nvmlDeviceGetMemoryInfo(self, h: FakeGpu) -> Any:
        g = self._device(h, "nvmlDeviceGetMemoryInfo")
        used, total = g.mem_used_mib * MIB, g.mem_total_mib * MIB
        return SimpleNamespace(used=used, total=total, free=total - used)

    def nvmlDeviceGetTemperature(self, h: FakeGpu, sensor: int) -> int:
        assert sensor == pynvml.NVML_TEMPERATURE_GPU
        return self._device(h, "nvmlDeviceGetTemperature").temp_c

    def nvmlDeviceGetTemperatureThreshold(self, h: FakeGpu, threshold: int) -> int:
        assert threshold == pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
        return self._device(h, "nvmlDeviceGetTemperatureThreshold").slowdown_temp_c

    def nvmlDeviceGetPowerUsage(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetPowerUsage").power_mw

    def nvmlDeviceGetEnforcedPowerLimit(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetEnforcedPowerLimit").power_limit_mw

    def nvmlDeviceGetClockInfo(self, h: FakeGpu, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return self._device(h, "nvmlDeviceGetClockInfo").sm_clock_mhz

    def nvmlDeviceGetMaxClockInfo(self, h: FakeGpu, clock: int) -> int:
        assert clock == pynvml.NVML_CLOCK_SM
        return self._device(h, "nvmlDeviceGetMaxClockInfo").max_sm_clock_mhz

    def nvmlDeviceGetCurrentClocksEventReasons(self, h: FakeGpu) -> int:
        return self._device(h, "nvmlDeviceGetCurrentClocksEventReasons").clock_event_reasons

    def nvmlDeviceGetTotalEccErrors(self, h: FakeGpu, error_type: int, counter: int) -> int:
        assert error_type == pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
        assert counter == pynvml.NVML_VOLATILE_ECC
        return self._device(h, "nvmlDeviceGetTotalEccErrors", "ecc").ecc_uncorrected

    def nvmlDeviceGetRemappedRows(self, h: FakeGpu) -> tuple[int, int, int, int]:
        g = self._device(h, "nvmlDeviceGetRemappedRows", "remapped_rows")
        return (0, 0, g.rows_pending, 0)

    def nvmlDeviceGetPcieThroughput(self, h: FakeGpu, counter: int) -> int:
        g = self._device(h, "nvmlDeviceGetPcieThroughput")
        return g.pcie_tx_kbs if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else g.pcie_rx_kbs

    def nvmlGpmQueryDeviceSupport(self, h: FakeGpu) -> Any:
        g = self._device(h, "nvmlGpmQueryDeviceSupport")
        return SimpleNamespace(version=1, isSupportedDevice=int("gpm" not in g.unsupported))

    def nvmlGpmSampleAlloc(self) -> _GpmSample:
        self.calls["nvmlGpmSampleAlloc"] += 1
        return _GpmSample()

    def nvmlGpmSampleFree(self, sample: _GpmSample) -> None:
        self.calls["nvmlGpmSampleFree"] += 1

    def nvmlGpmSampleGet(self, h: FakeGpu, sample: _GpmSample) -> _GpmSample:
        sample.sm_util_pct = self._device(h, "nvmlGpmSampleGet", "gpm").sm_util_pct
        return sample

    def nvmlGpmMetricsGet(self, request: _GpmMetricsGet) -> _GpmMetricsGet:
        self.calls["nvmlGpmMetricsGet"] += 1
        assert request.version == pynvml.NVML_GPM_METRICS_GET_VERSION
        first, second = request.sample1, request.sample2
        assert first is not None
        assert second is not None
        assert first is not second
        assert first.sm_util_pct is not None, "GPM interval without a starting sample"
        for metric in request.metrics[: request.numMetrics]:
            assert metric.metricId == pynvml.NVML_GPM_METRIC_SM_UTIL
            # The interval's activity is what the later sample saw (a counter difference).
            metric.value, metric.nvmlReturn = second.sm_util_pct, pynvml.NVML_SUCCESS
        return request
