"""dcgm-exporter's Prometheus text → one reading per GPU, in the node-sample's terms (pure).

dcgm-exporter (github.com/NVIDIA/dcgm-exporter) writes one series per GPU and DCGM field::

    DCGM_FI_DEV_GPU_TEMP{gpu="0",UUID="GPU-…",pci_bus_id="00000000:07:00.0",
        device="nvidia0",modelName="NVIDIA H100 80GB HBM3",Hostname="gpu-node-3",
        DCGM_FI_DRIVER_VERSION="570.124.06"} 41

Labels: ``gpu`` (the NVML index), ``UUID`` (``uuid`` with ``--use-old-namespace``),
``modelName``, ``Hostname`` (``hostname`` since the release after 4.5.3-4.8.2; absent
with ``--no-hostname``), ``device``, label counters such as ``DCGM_FI_DRIVER_VERSION``,
``GPU_I_PROFILE``/``GPU_I_ID`` on MIG instances, ``pod``/``namespace``/``container`` when
it maps pods. What the exporter does not export is absent here, and so ``None`` in the
record, never 0; so are DCGM's "blank" sentinels, which older exporters printed raw.

Which record field comes from which DCGM field is :data:`FIELD_SOURCES` (docs/agent.md
has the table).
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from fairlane_agent.errors import DcgmFormatError

__all__ = [
    "FIELD_SOURCES",
    "LOST_XIDS",
    "DcgmGpu",
    "is_dcgm_blank",
    "read_exposition",
    "record_fields",
    "unhealthy_because",
]

MIB = 1024 * 1024
#: DCGM_CLOCKS_EVENT_REASON_GPU_IDLE: a free GPU sets it all the time; not a slowdown.
IDLE_REASON = 0x1

# DCGM's "no value" sentinels (dcgm_structs.h): INT32_BLANK = 0x7ffffff0, INT64_BLANK =
# 0x7ffffffffffffff0, FP64_BLANK = 2**47, each followed by NOT_FOUND, NOT_SUPPORTED,
# NOT_PERMISSIONED (+1, +2, +3; DCGM reserves +0..+15).
_INT32_BLANK = 0x7FFFFFF0
_FP64_BLANK = float(2**47)

#: XIDs after which a GPU is not used until it is reset (NVIDIA's XID catalogue):
#: 48 double-bit ECC error, 79 GPU has fallen off the bus, 95 uncontained ECC error.
#: dcgm-exporter's DCGM_FI_DEV_XID_ERRORS holds the *last* XID; a GPU reset needs DCGM
#: stopped, so the value clears when the GPU is usable again.
LOST_XIDS = frozenset({48, 79, 95})

#: Record field → the dcgm-exporter metrics it is read from (first present wins).
FIELD_SOURCES: dict[str, tuple[str, ...]] = {
    "gpu_util_pct": ("DCGM_FI_DEV_GPU_UTIL",),
    "mem_util_pct": ("DCGM_FI_DEV_MEM_COPY_UTIL",),
    "mem_used_bytes": ("DCGM_FI_DEV_FB_USED",),
    "mem_total_bytes": ("DCGM_FI_DEV_FB_TOTAL", "DCGM_FI_DEV_FB_FREE", "DCGM_FI_DEV_FB_RESERVED"),
    "sm_active": ("DCGM_FI_PROF_SM_ACTIVE",),
    "temp_c": ("DCGM_FI_DEV_GPU_TEMP",),
    "slowdown_temp_c": ("DCGM_FI_DEV_SLOWDOWN_TEMP",),
    "power_w": ("DCGM_FI_DEV_POWER_USAGE",),
    "power_limit_w": ("DCGM_FI_DEV_ENFORCED_POWER_LIMIT", "DCGM_FI_DEV_POWER_MGMT_LIMIT"),
    "sm_clock_mhz": ("DCGM_FI_DEV_SM_CLOCK",),
    "max_sm_clock_mhz": ("DCGM_FI_DEV_MAX_SM_CLOCK",),
    "clock_event_reasons": (
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "DCGM_FI_DEV_CLOCK_THROTTLE_REASONS",  # the same field (112) before DCGM 3.3
    ),
    "ecc_uncorrected_volatile": ("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL",),
    "remapped_rows_pending": ("DCGM_FI_DEV_ROW_REMAP_PENDING",),
    "pcie_tx_bytes_per_s": ("DCGM_FI_PROF_PCIE_TX_BYTES",),
    "pcie_rx_bytes_per_s": ("DCGM_FI_PROF_PCIE_RX_BYTES",),
    "healthy": ("DCGM_FI_DEV_XID_ERRORS", "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
}

_UUID_LABELS = ("UUID", "uuid")
_HOST_LABELS = ("Hostname", "hostname")
_POD_LABELS = ("pod", "pod_name")
_DRIVER_LABEL = "DCGM_FI_DRIVER_VERSION"


@dataclass(frozen=True)
class DcgmGpu:
    """One GPU as one exposition shows it: identity, and record fields that were present."""

    node: str
    uuid: str
    index: int
    model: str
    metrics: Mapping[str, Any]
    driver_version: str | None = None
    unhealthy_because: str | None = None  # "XID 79 (…)", "row remapping failed"


def is_dcgm_blank(value: float) -> bool:
    """Whether ``value`` is one of DCGM's "no value" sentinels rather than a reading."""
    return _INT32_BLANK <= value <= _INT32_BLANK + 15 or value >= _FP64_BLANK


@dataclass
class _Series:
    """What the exposition holds for one GPU, gathered series by series."""

    node: str
    index: int
    model: str
    driver_version: str | None = None
    # metric name -> [(is device-wide, value)]; several when the exporter maps pods
    values: dict[str, list[tuple[bool, float]]] = field(default_factory=lambda: defaultdict(list))


def read_exposition(text: str, default_node: str) -> list[DcgmGpu]:
    """Every GPU in one dcgm-exporter scrape, in the order first seen.

    ``default_node`` names the node of series without a ``Hostname`` label (the exporter
    runs with ``--no-hostname``): the caller passes the host of the scrape URL. Series
    of MIG instances (``GPU_I_ID``) are left out: Fairlane places whole GPUs, and the
    whole GPU's device fields come without it. Where several series remain for one GPU
    and field (one per pod, when the exporter maps pods), the device-wide one (no pod
    label) is taken, else the largest: the GPU is at least as busy as its busiest pod.
    Raises :class:`DcgmFormatError` if ``text`` is not an exposition.
    """
    gpus: dict[str, _Series] = {}
    try:
        for family in text_string_to_metric_families(text):
            # Family names are the exporter's metric names; the parser appends "_total"
            # to the *sample* names of counters that lack it.
            for sample in family.samples:
                _add(gpus, family.name, sample.labels, float(sample.value), default_node)
    except ValueError as exc:  # the parser's only error for malformed text
        raise DcgmFormatError(f"not a Prometheus exposition: {exc}") from exc
    return [_gpu(uuid, series) for uuid, series in gpus.items()]


def _add(
    gpus: dict[str, _Series], name: str, labels: Mapping[str, str], value: float, node: str
) -> None:
    uuid = _first_label(labels, _UUID_LABELS)
    if uuid is None or labels.get("GPU_I_ID"):
        return  # not a whole GPU (NVSwitch, CPU, NVLink or MIG-instance series)
    try:
        index = int(labels.get("gpu", ""))
    except ValueError:
        return
    series = gpus.get(uuid)
    if series is None:
        host = _first_label(labels, _HOST_LABELS) or node
        series = gpus[uuid] = _Series(host, index, labels.get("modelName") or "unknown")
    if series.driver_version is None and labels.get(_DRIVER_LABEL):
        series.driver_version = labels[_DRIVER_LABEL]
    if math.isfinite(value) and not is_dcgm_blank(value):
        device_wide = not any(labels.get(p) for p in _POD_LABELS)
        series.values[name].append((device_wide, value))


def _first_label(labels: Mapping[str, str], names: Iterable[str]) -> str | None:
    return next((labels[n] for n in names if labels.get(n)), None)


def _pick(readings: list[tuple[bool, float]]) -> float:
    device_wide = [v for is_device, v in readings if is_device]
    return device_wide[0] if device_wide else max(v for _, v in readings)


def _gpu(uuid: str, series: _Series) -> DcgmGpu:
    values = {name: _pick(readings) for name, readings in series.values.items()}
    return DcgmGpu(
        node=series.node,
        uuid=uuid,
        index=series.index,
        model=series.model,
        metrics=record_fields(values),
        driver_version=series.driver_version,
        unhealthy_because=unhealthy_because(values),
    )


def _first(values: Mapping[str, float], record_field: str) -> float | None:
    return next((values[n] for n in FIELD_SOURCES[record_field] if n in values), None)


def record_fields(values: Mapping[str, float]) -> dict[str, Any]:
    """Node-sample GPU fields from one GPU's DCGM values (metric name → value).

    Units: framebuffer MiB → bytes, SM activity and PCIe as DCGM gives them (ratio,
    bytes/s), the rest unchanged (%, °C, W, MHz). The idle bit is masked out of the
    clock-event reasons, as the NVML agent does. Memory total is DCGM_FI_DEV_FB_TOTAL,
    else used + free + reserved when all three are exported (what DCGM's total is).
    """
    out: dict[str, Any] = {}
    for name in (
        "gpu_util_pct",
        "mem_util_pct",
        "sm_active",
        "temp_c",
        "slowdown_temp_c",
        "power_w",
        "power_limit_w",
        "sm_clock_mhz",
        "max_sm_clock_mhz",
        "pcie_tx_bytes_per_s",
        "pcie_rx_bytes_per_s",
    ):
        if (value := _first(values, name)) is not None:
            out[name] = value
    if (used := values.get("DCGM_FI_DEV_FB_USED")) is not None:
        out["mem_used_bytes"] = int(used) * MIB
    if (total := _fb_total_mib(values)) is not None:
        out["mem_total_bytes"] = int(total) * MIB
    if (reasons := _first(values, "clock_event_reasons")) is not None:
        out["clock_event_reasons"] = int(reasons) & ~IDLE_REASON
    if (ecc := values.get("DCGM_FI_DEV_ECC_DBE_VOL_TOTAL")) is not None:
        out["ecc_uncorrected_volatile"] = int(ecc)
    if (pending := values.get("DCGM_FI_DEV_ROW_REMAP_PENDING")) is not None:
        out["remapped_rows_pending"] = pending > 0
    return out


def _fb_total_mib(values: Mapping[str, float]) -> float | None:
    if (total := values.get("DCGM_FI_DEV_FB_TOTAL")) is not None:
        return total
    parts = [values.get(f"DCGM_FI_DEV_FB_{p}") for p in ("USED", "FREE", "RESERVED")]
    return None if None in parts else sum(p for p in parts if p is not None)


def unhealthy_because(values: Mapping[str, float]) -> str | None:
    """Why the GPU is reported unhealthy (its last XID, a failed row remap), or None."""
    xid = values.get("DCGM_FI_DEV_XID_ERRORS")
    if xid is not None and int(xid) in LOST_XIDS:
        return f"XID {int(xid)}"
    if values.get("DCGM_FI_DEV_ROW_REMAP_FAILURE", 0) > 0:
        return "row remapping failed"
    return None
