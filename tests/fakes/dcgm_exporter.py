"""A twin of NVIDIA's dcgm-exporter's ``/metrics`` for the DCGM bridge's tests.

:func:`render` writes what dcgm-exporter's GPU template (internal/pkg/rendermetrics)
prints: per counter a ``# HELP`` and ``# TYPE`` line, then one series per GPU with the
labels ``gpu``, ``UUID``, ``pci_bus_id``, ``device``, ``modelName``, ``Hostname`` (in that
order), then label counters and attributes in sorted order (``DCGM_FI_DRIVER_VERSION``;
``err_code``/``err_msg`` on XIDs); integers with ``%d``, doubles with ``%f``; a value DCGM
does not have is not printed at all. ``tests/fixtures/dcgm/`` holds expositions in that
format, checked line by line against a real dcgm-exporter 4.x scrape of an L4 node.

:class:`FakeExporter` serves expositions over real HTTP on a free port; change
``text``, ``status`` or ``delay_s`` between scrapes, or :meth:`FakeExporter.stop` it to play an
exporter that is down.
"""

from __future__ import annotations

import contextlib
import csv
import threading
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FIXTURES = ROOT / "tests" / "fixtures" / "dcgm"
FAIRLANE_COUNTERS_CSV = ROOT / "deploy" / "dcgm-exporter" / "fairlane-counters.csv"

Value = int | float


@dataclass(frozen=True)
class Counter:
    name: str
    prom_type: str  # gauge | counter | label
    help: str


#: dcgm-exporter's etc/default-counters.csv (4.5.3-4.8.2), the lines not commented out.
DEFAULT_COUNTERS: tuple[Counter, ...] = tuple(
    Counter(n, t, h)
    for n, t, h in (
        ("DCGM_FI_DEV_SM_CLOCK", "gauge", "SM clock frequency (in MHz)."),
        ("DCGM_FI_DEV_MEM_CLOCK", "gauge", "Memory clock frequency (in MHz)."),
        ("DCGM_FI_DEV_MEMORY_TEMP", "gauge", "Memory temperature (in C)."),
        ("DCGM_FI_DEV_GPU_TEMP", "gauge", "GPU temperature (in C)."),
        ("DCGM_FI_DEV_POWER_USAGE", "gauge", "Power draw (in W)."),
        (
            "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION",
            "counter",
            "Total energy consumption since boot (in mJ).",
        ),
        ("DCGM_FI_DEV_PCIE_REPLAY_COUNTER", "counter", "Total number of PCIe retries."),
        ("DCGM_FI_DEV_GPU_UTIL", "gauge", "GPU utilization (in %)."),
        ("DCGM_FI_DEV_MEM_COPY_UTIL", "gauge", "Memory utilization (in %)."),
        ("DCGM_FI_DEV_ENC_UTIL", "gauge", "Encoder utilization (in %)."),
        ("DCGM_FI_DEV_DEC_UTIL", "gauge", "Decoder utilization (in %)."),
        ("DCGM_FI_DEV_XID_ERRORS", "gauge", "Value of the last XID error encountered."),
        ("DCGM_FI_DEV_FB_FREE", "gauge", "Framebuffer memory free (in MiB)."),
        ("DCGM_FI_DEV_FB_USED", "gauge", "Framebuffer memory used (in MiB)."),
        ("DCGM_FI_DEV_FB_RESERVED", "gauge", "Framebuffer memory reserved (in MiB)."),
        (
            "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL",
            "counter",
            "Total number of NVLink bandwidth counters for all lanes.",
        ),
        ("DCGM_FI_DEV_VGPU_LICENSE_STATUS", "gauge", "vGPU License status"),
        (
            "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for uncorrectable errors",
        ),
        (
            "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS",
            "counter",
            "Number of remapped rows for correctable errors",
        ),
        ("DCGM_FI_DEV_ROW_REMAP_FAILURE", "gauge", "Whether remapping of rows has failed"),
        ("DCGM_FI_DRIVER_VERSION", "label", "Driver Version"),
        ("DCGM_FI_PROF_GR_ENGINE_ACTIVE", "gauge", "Ratio of time the graphics engine is active."),
        (
            "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE",
            "gauge",
            "Ratio of cycles the tensor (HMMA) pipe is active.",
        ),
        (
            "DCGM_FI_PROF_DRAM_ACTIVE",
            "gauge",
            "Ratio of cycles the device memory interface is active sending or receiving data.",
        ),
        (
            "DCGM_FI_PROF_PCIE_TX_BYTES",
            "gauge",
            "The rate of data transmitted over the PCIe bus - including both protocol "
            "headers and data payloads - in bytes per second.",
        ),
        (
            "DCGM_FI_PROF_PCIE_RX_BYTES",
            "gauge",
            "The rate of data received over the PCIe bus - including both protocol "
            "headers and data payloads - in bytes per second.",
        ),
    )
)


def read_counters_csv(path: Path) -> tuple[Counter, ...]:
    """A counters file read as dcgm-exporter reads it (Go's encoding/csv, ``#`` comments,
    exactly three fields a line, each trimmed)."""
    rows = []
    with path.open(newline="") as f:
        for number, row in enumerate(csv.reader(f), start=1):
            if not row or row[0].lstrip().startswith("#"):
                continue
            if len(row) != 3:
                raise ValueError(f"{path.name}:{number}: expected 3 fields, got {row}")
            rows.append(Counter(*(cell.strip() for cell in row)))
    return tuple(rows)


#: XID texts dcgm-exporter puts in ``err_msg`` (a few; its table has them all).
XID_TEXT = {0: "No Error", 48: "Double Bit ECC Error", 79: "GPU has fallen off the bus"}


@dataclass
class ExporterGpu:
    """One GPU as dcgm-exporter sees it: DCGM field name → value (absent: not exported)."""

    index: int
    uuid: str
    model: str = "NVIDIA H100 80GB HBM3"
    pci_bus_id: str = ""
    values: dict[str, Value] = field(default_factory=dict)
    labels: dict[str, str] = field(default_factory=dict)  # pod, namespace, GPU_I_ID, …

    def __post_init__(self) -> None:
        self.pci_bus_id = self.pci_bus_id or f"00000000:{0x18 + 0x10 * self.index:02X}:00.0"


def h100_values(**overrides: Value) -> dict[str, Value]:
    """An idle H100 80GB (values a real one shows), every field Fairlane's counters ask."""
    values: dict[str, Value] = {
        "DCGM_FI_DEV_SM_CLOCK": 345,
        "DCGM_FI_DEV_MEM_CLOCK": 2619,
        "DCGM_FI_DEV_MAX_SM_CLOCK": 1980,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": 1,  # idle
        "DCGM_FI_DEV_MEMORY_TEMP": 30,
        "DCGM_FI_DEV_GPU_TEMP": 33,
        "DCGM_FI_DEV_SLOWDOWN_TEMP": 90,
        "DCGM_FI_DEV_POWER_USAGE": 71.5,
        "DCGM_FI_DEV_ENFORCED_POWER_LIMIT": 700.0,
        "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION": 48213377411,
        "DCGM_FI_DEV_PCIE_REPLAY_COUNTER": 0,
        "DCGM_FI_DEV_GPU_UTIL": 0,
        "DCGM_FI_DEV_MEM_COPY_UTIL": 0,
        "DCGM_FI_DEV_ENC_UTIL": 0,
        "DCGM_FI_DEV_DEC_UTIL": 0,
        "DCGM_FI_DEV_FB_TOTAL": 81559,
        "DCGM_FI_DEV_FB_FREE": 81004,
        "DCGM_FI_DEV_FB_USED": 0,
        "DCGM_FI_DEV_FB_RESERVED": 555,
        "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL": 0,
        "DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL": 0,
        "DCGM_FI_DEV_VGPU_LICENSE_STATUS": 0,
        "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS": 0,
        "DCGM_FI_DEV_ROW_REMAP_FAILURE": 0,
        "DCGM_FI_DEV_ROW_REMAP_PENDING": 0,
        "DCGM_FI_PROF_GR_ENGINE_ACTIVE": 0.0,
        "DCGM_FI_PROF_SM_ACTIVE": 0.0,
        "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE": 0.0,
        "DCGM_FI_PROF_DRAM_ACTIVE": 0.0,
        "DCGM_FI_PROF_PCIE_TX_BYTES": 212_993,
        "DCGM_FI_PROF_PCIE_RX_BYTES": 40_011,
    }
    values.update(overrides)
    return values


def _number(value: Value) -> str:
    return f"{value:f}" if isinstance(value, float) else f"{value:d}"


def render(
    gpus: list[ExporterGpu],
    counters: tuple[Counter, ...] = DEFAULT_COUNTERS,
    *,
    hostname: str | None = "gpu-node-1",
    hostname_label: str = "Hostname",
    uuid_label: str = "UUID",
    driver: str = "570.124.06",
) -> str:
    """The exposition dcgm-exporter prints for ``gpus`` with ``counters``."""
    label_counters = {c.name for c in counters if c.prom_type == "label"}
    lines: list[str] = []
    for counter in counters:
        if counter.prom_type == "label":
            continue
        lines += [
            f"# HELP {counter.name} {counter.help}",
            f"# TYPE {counter.name} {counter.prom_type}",
        ]
        for gpu in gpus:
            if (value := gpu.values.get(counter.name)) is None:
                continue  # DCGM returned a blank: dcgm-exporter skips the series
            extra = dict(gpu.labels)
            if "DCGM_FI_DRIVER_VERSION" in label_counters:
                extra["DCGM_FI_DRIVER_VERSION"] = driver
            if counter.name == "DCGM_FI_DEV_XID_ERRORS":
                extra |= {"err_code": str(value), "err_msg": XID_TEXT.get(int(value), "Unknown")}
            labels = _labels(gpu, extra, hostname, hostname_label, uuid_label)
            lines.append(f"{counter.name}{{{labels}}} {_number(value)}")
    return "\n".join(lines) + "\n"


def _labels(
    gpu: ExporterGpu,
    extra: Mapping[str, str],
    hostname: str | None,
    hostname_label: str,
    uuid_label: str,
) -> str:
    fixed = [
        ("gpu", str(gpu.index)),
        (uuid_label, gpu.uuid),
        ("pci_bus_id", gpu.pci_bus_id),
        ("device", f"nvidia{gpu.index}"),
        ("modelName", gpu.model),
    ]
    if "GPU_I_ID" in extra:
        fixed += [("GPU_I_PROFILE", extra["GPU_I_PROFILE"]), ("GPU_I_ID", extra["GPU_I_ID"])]
    if hostname:
        fixed.append((hostname_label, hostname))
    rest = sorted((k, v) for k, v in extra.items() if k not in ("GPU_I_ID", "GPU_I_PROFILE"))
    return ",".join(f'{k}="{v}"' for k, v in fixed + rest)


class FakeExporter:
    """dcgm-exporter's HTTP side: ``GET /metrics`` answers ``text`` with ``status``."""

    def __init__(self, text: str = "") -> None:
        self.text = text
        self.status = 200
        self.delay_s = 0.0  # answer this late (a hung exporter)
        self.scrapes = 0
        exporter = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                exporter.scrapes += 1
                time.sleep(exporter.delay_s)
                body = exporter.text.encode()
                self.send_response(exporter.status)
                self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *_args: object) -> None:
                pass

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self._server.server_address[1]}/metrics"
        self._thread = threading.Thread(
            target=self._server.serve_forever, args=(0.05,), daemon=True
        )
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        """Close the socket: scrapes are refused from now on."""
        self._server.shutdown()
        self._server.server_close()
        self._thread.join()


@contextlib.contextmanager
def serve(text: str = "") -> Iterator[FakeExporter]:
    """A :class:`FakeExporter` for a ``with`` block (stopped afterwards)."""
    exporter = FakeExporter(text)
    try:
        yield exporter
    finally:
        if exporter.running:
            exporter.stop()


def fixture_gpus() -> list[ExporterGpu]:
    """The two H100s of tests/fixtures/dcgm/: GPU 0 idle; GPU 1 running a job, hot, its
    clocks held down by SW thermal slowdown and the power cap."""
    busy = h100_values(
        DCGM_FI_DEV_SM_CLOCK=1410,
        DCGM_FI_DEV_CLOCKS_EVENT_REASONS=0x20 | 0x4,
        DCGM_FI_DEV_MEMORY_TEMP=79,
        DCGM_FI_DEV_GPU_TEMP=88,
        DCGM_FI_DEV_POWER_USAGE=655.123,
        DCGM_FI_DEV_GPU_UTIL=97,
        DCGM_FI_DEV_MEM_COPY_UTIL=41,
        DCGM_FI_DEV_FB_FREE=19564,
        DCGM_FI_DEV_FB_USED=61440,
        DCGM_FI_PROF_GR_ENGINE_ACTIVE=0.951,
        DCGM_FI_PROF_SM_ACTIVE=0.912,
        DCGM_FI_PROF_PIPE_TENSOR_ACTIVE=0.45,
        DCGM_FI_PROF_DRAM_ACTIVE=0.38,
        DCGM_FI_PROF_PCIE_TX_BYTES=3_210_442,
        DCGM_FI_PROF_PCIE_RX_BYTES=9_876_543,
    )
    return [
        ExporterGpu(0, "GPU-5d3a0f4e-8a7b-4b0e-9c61-2f1d7e8a9b01", values=h100_values()),
        ExporterGpu(1, "GPU-b81c2d3e-4f5a-6b7c-8d9e-0a1b2c3d4e5f", values=busy),
    ]


def fixture_texts() -> dict[str, str]:
    """The files of tests/fixtures/dcgm/, as this twin renders them."""
    return {
        "default-counters-2xh100.prom": render(fixture_gpus(), DEFAULT_COUNTERS),
        "fairlane-counters-2xh100.prom": render(
            fixture_gpus(), read_counters_csv(FAIRLANE_COUNTERS_CSV), hostname_label="hostname"
        ),
    }


def read_fixture(name: str) -> str:
    return (FIXTURES / name).read_text()
