"""Reading real GPUs through NVML (nvidia-ml-py), one :class:`NvmlCollector` per node.

The ``pynvml`` module is a parameter, never imported here: it is the one boundary that
tests replace (``tests/fakes/nvml.py`` plays a V100, H100, T4, a lost GPU and a broken
driver), so the code below is exactly what runs on a real node.

Error policy, per GPU:

- ``NVMLError_NotSupported`` on a metric: the metric is ``None`` from then on and is not
  asked again (a feature does not appear between samples, and asking costs a driver call);
- ``NVMLError_GpuIsLost``: the GPU is reported ``healthy=False`` with no metrics from
  then on (a lost GPU needs a reset, which needs a new NVML session);
- any other NVML error: that round's record for the GPU is ``healthy=False``; the next
  round asks again. Each (GPU, error kind) is logged once; every error is counted.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from fairlane_agent.errors import NvmlUnavailableError
from fairlane_events.records import GpuSample, NodeSample

__all__ = ["NvmlCollector", "NvmlLib", "error_kind"]

log = logging.getLogger("fairlane.agent.nvml")

#: The pynvml module or its test twin (pynvml ships no type information).
NvmlLib = Any

#: NVML reports power in milliwatts and PCIe throughput in KB/s.
_MW_PER_W = 1000.0
_BYTES_PER_KB = 1000.0


def error_kind(exc: BaseException) -> str:
    """``NVMLError_GpuIsLost`` -> ``GpuIsLost``: the label errors are counted under."""
    return type(exc).__name__.removeprefix("NVMLError_")


@dataclass
class _Gpu:
    """One GPU's handle and what has been learnt about it."""

    index: int
    handle: Any
    uuid: str
    model: str
    unsupported: set[str] = field(default_factory=set)
    logged: set[str] = field(default_factory=set)
    lost: bool = False
    gpm_samples: list[Any] | None = None  # [previous, current] GPM samples when supported


# A reader turns one NVML call into record fields; its name is what "not supported" marks.
_Reader = Callable[[NvmlLib, "_Gpu"], dict[str, Any]]


def _utilization(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    rates = nvml.nvmlDeviceGetUtilizationRates(gpu.handle)
    return {"gpu_util_pct": float(rates.gpu), "mem_util_pct": float(rates.memory)}


def _memory(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    info = nvml.nvmlDeviceGetMemoryInfo(gpu.handle)
    return {"mem_used_bytes": int(info.used), "mem_total_bytes": int(info.total)}


def _temperature(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    return {"temp_c": float(nvml.nvmlDeviceGetTemperature(gpu.handle, nvml.NVML_TEMPERATURE_GPU))}


def _slowdown(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    threshold = nvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN
    return {"slowdown_temp_c": float(nvml.nvmlDeviceGetTemperatureThreshold(gpu.handle, threshold))}


def _power(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    return {"power_w": nvml.nvmlDeviceGetPowerUsage(gpu.handle) / _MW_PER_W}


def _power_limit(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    return {"power_limit_w": nvml.nvmlDeviceGetEnforcedPowerLimit(gpu.handle) / _MW_PER_W}


def _sm_clock(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    return {"sm_clock_mhz": float(nvml.nvmlDeviceGetClockInfo(gpu.handle, nvml.NVML_CLOCK_SM))}


def _max_sm_clock(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    return {
        "max_sm_clock_mhz": float(nvml.nvmlDeviceGetMaxClockInfo(gpu.handle, nvml.NVML_CLOCK_SM))
    }


def _clock_events(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    # Idle is not a slowdown: a free GPU sets it all the time. Mask it out at the source.
    reasons = int(nvml.nvmlDeviceGetCurrentClocksEventReasons(gpu.handle))
    return {"clock_event_reasons": reasons & ~int(nvml.nvmlClocksEventReasonGpuIdle)}


def _ecc(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    kind, counter = nvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nvml.NVML_VOLATILE_ECC
    count = nvml.nvmlDeviceGetTotalEccErrors(gpu.handle, kind, counter)
    return {"ecc_uncorrected_volatile": int(count)}


def _remapped_rows(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    _corrected, _uncorrected, pending, _failed = nvml.nvmlDeviceGetRemappedRows(gpu.handle)
    return {"remapped_rows_pending": bool(pending)}


def _pcie(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    tx = nvml.nvmlDeviceGetPcieThroughput(gpu.handle, nvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = nvml.nvmlDeviceGetPcieThroughput(gpu.handle, nvml.NVML_PCIE_UTIL_RX_BYTES)
    return {"pcie_tx_bytes_per_s": tx * _BYTES_PER_KB, "pcie_rx_bytes_per_s": rx * _BYTES_PER_KB}


def _sm_active(nvml: NvmlLib, gpu: _Gpu) -> dict[str, Any]:
    """GPM SM utilisation between the previous round's GPM sample and this one.

    Two GPM samples bracket the interval; reusing the last round's as the start gives
    the mean over the whole interval without sleeping between two reads.
    """
    assert gpu.gpm_samples is not None  # "sm_active" is marked unsupported otherwise
    previous, current = gpu.gpm_samples
    nvml.nvmlGpmSampleGet(gpu.handle, current)
    request = nvml.c_nvmlGpmMetricsGet_t()
    request.version = nvml.NVML_GPM_METRICS_GET_VERSION
    request.numMetrics = 1
    request.sample1, request.sample2 = previous, current
    request.metrics[0].metricId = nvml.NVML_GPM_METRIC_SM_UTIL
    nvml.nvmlGpmMetricsGet(request)
    gpu.gpm_samples = [current, previous]  # this round's sample starts the next interval
    metric = request.metrics[0]
    if metric.nvmlReturn != nvml.NVML_SUCCESS:
        raise nvml.NVMLError(metric.nvmlReturn)
    return {"sm_active": min(1.0, max(0.0, metric.value / 100.0))}


_READERS: tuple[tuple[str, _Reader], ...] = (
    ("utilization", _utilization),
    ("memory", _memory),
    ("temperature", _temperature),
    ("slowdown_temperature", _slowdown),
    ("power", _power),
    ("power_limit", _power_limit),
    ("sm_clock", _sm_clock),
    ("max_sm_clock", _max_sm_clock),
    ("clock_events", _clock_events),
    ("ecc", _ecc),
    ("remapped_rows", _remapped_rows),
    ("pcie", _pcie),
    ("sm_active", _sm_active),
)


class NvmlCollector:
    """Samples every GPU of this node; ``close()`` ends the NVML session."""

    def __init__(
        self, nvml: NvmlLib, node: str, on_error: Callable[[str], None] = lambda _kind: None
    ) -> None:
        self._nvml = nvml
        self._node = node
        self._on_error = on_error
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise NvmlUnavailableError(f"NVML could not start: {exc}") from exc
        try:
            self.driver_version: str = nvml.nvmlSystemGetDriverVersion()
            count = nvml.nvmlDeviceGetCount()
        except nvml.NVMLError as exc:
            nvml.nvmlShutdown()
            raise NvmlUnavailableError(f"NVML could not list the GPUs: {exc}") from exc
        self._gpus = [self._open_gpu(i) for i in range(count)]
        if not self._gpus:
            nvml.nvmlShutdown()
            raise NvmlUnavailableError("NVML found no GPU on this node")

    def _open_gpu(self, index: int) -> _Gpu:
        nvml = self._nvml
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            gpu = _Gpu(
                index, handle, nvml.nvmlDeviceGetUUID(handle), nvml.nvmlDeviceGetName(handle)
            )
        except nvml.NVMLError as exc:
            # Still reported (unhealthy) so that the scheduler sees the GPU is there and bad.
            gpu = _Gpu(index, None, f"GPU-unreadable-{index}", "unknown", lost=True)
            self._note_error(gpu, "identity", exc)
            return gpu
        self._start_gpm(gpu)
        return gpu

    def _start_gpm(self, gpu: _Gpu) -> None:
        """Take the first GPM sample now, so the first round already has SM activity."""
        nvml = self._nvml
        try:
            if not nvml.nvmlGpmQueryDeviceSupport(gpu.handle).isSupportedDevice:
                gpu.unsupported.add("sm_active")
                return
            samples = [nvml.nvmlGpmSampleAlloc(), nvml.nvmlGpmSampleAlloc()]
            nvml.nvmlGpmSampleGet(gpu.handle, samples[0])
        except nvml.NVMLError as exc:
            self._note_error(gpu, "sm_active", exc)
            gpu.unsupported.add("sm_active")  # GPM could not start: absent for this session
            return
        gpu.gpm_samples = samples

    @property
    def gpu_count(self) -> int:
        return len(self._gpus)

    def sample(self, ts_ms: int) -> list[NodeSample]:
        """This node's record for the round at ``ts_ms`` (a list, like the simulator's)."""
        return [
            NodeSample(
                schema_="node-sample/1",
                node=self._node,
                ts_ms=ts_ms,
                source="nvml",
                driver_version=self.driver_version,
                gpus=[self._sample_gpu(g) for g in self._gpus],
            )
        ]

    def _sample_gpu(self, gpu: _Gpu) -> GpuSample:
        base = {"uuid": gpu.uuid, "index": gpu.index, "model": gpu.model}
        if gpu.lost:
            return GpuSample(**base, healthy=False)
        fields: dict[str, Any] = {}
        for name, reader in _READERS:
            if name in gpu.unsupported:
                continue
            try:
                fields.update(reader(self._nvml, gpu))
            except self._nvml.NVMLError as exc:
                self._note_error(gpu, name, exc)
                if isinstance(exc, self._nvml.NVMLError_NotSupported):
                    continue
                return GpuSample(**base, healthy=False)
        return GpuSample(**base, **fields)

    def _note_error(self, gpu: _Gpu, metric: str, exc: BaseException) -> None:
        kind = error_kind(exc)
        self._on_error(kind)
        if isinstance(exc, self._nvml.NVMLError_NotSupported):
            gpu.unsupported.add(metric)
            log.info(
                "GPU %d (%s): %s not supported, reported as null", gpu.index, gpu.model, metric
            )
            return
        if isinstance(exc, self._nvml.NVMLError_GpuIsLost):
            gpu.lost = True
        if kind not in gpu.logged:
            gpu.logged.add(kind)
            log.error("GPU %d (%s) %s: %s; reported unhealthy", gpu.index, gpu.uuid, metric, exc)

    def close(self) -> None:
        for gpu in self._gpus:
            for sample in gpu.gpm_samples or ():
                self._nvml.nvmlGpmSampleFree(sample)
        self._nvml.nvmlShutdown()
