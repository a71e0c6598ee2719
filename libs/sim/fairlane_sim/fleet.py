"""A simulated fleet that produces node samples shaped exactly like the real agent's.

Deterministic: the same spec, seed and sequence of ``sample(ts_ms)`` calls give the same
records. Time is an argument; nothing here reads the clock. A fraction of GPUs is
thermally degraded (hot, clock held down with the thermal-slowdown reason set), which is
what the score must catch; each GPU also keeps a hidden ``true_speed`` for evaluations.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

import numpy as np

from fairlane_events.gpu_models import CATALOG, GpuModelSpec
from fairlane_events.records import GpuSample, NodeSample

__all__ = ["CLOCK_EVENT_HW_THERMAL", "FleetSimulator", "FleetSpec", "SimGpu"]

#: NVML clock-event reason bits the simulator sets.
CLOCK_EVENT_IDLE = 0x1
CLOCK_EVENT_HW_THERMAL = 0x40

_GIB = 1024**3


@dataclass(frozen=True)
class FleetSpec:
    nodes: int
    gpus_per_node: int = 8
    models: tuple[str, ...] = ("A100-80GB", "H100", "V100")  # catalogue keys, per node
    degraded_fraction: float = 0.05
    seed: int = 0
    node_prefix: str = "sim-node"

    def __post_init__(self) -> None:
        if self.nodes < 1 or not 1 <= self.gpus_per_node <= 64:
            raise ValueError("need nodes >= 1 and 1 <= gpus_per_node <= 64")
        unknown = [m for m in self.models if m not in CATALOG]
        if not self.models or unknown:
            raise ValueError(f"models must be catalogue keys, unknown: {unknown}")
        if not 0 <= self.degraded_fraction <= 1:
            raise ValueError("degraded_fraction must be in [0, 1]")


@dataclass(frozen=True)
class SimGpu:
    node: str
    index: int
    uuid: str
    spec: GpuModelSpec
    degraded: bool
    true_speed: float  # relative to a healthy GPU of the same model (hidden from the score)


class FleetSimulator:
    def __init__(self, spec: FleetSpec) -> None:
        self.spec = spec
        self._rng = np.random.default_rng(spec.seed)
        self.gpus: dict[str, list[SimGpu]] = {}
        for n in range(spec.nodes):
            node = f"{spec.node_prefix}-{n:04d}"
            model = CATALOG[spec.models[n % len(spec.models)]]
            self.gpus[node] = [self._make_gpu(node, i, model) for i in range(spec.gpus_per_node)]

    def _make_gpu(self, node: str, index: int, model: GpuModelSpec) -> SimGpu:
        degraded = bool(self._rng.random() < self.spec.degraded_fraction)
        gpu_uuid = uuid.UUID(bytes=self._rng.bytes(16), version=4)
        # Hardware thermal slowdown roughly halves the SM clock.
        return SimGpu(node, index, f"GPU-{gpu_uuid}", model, degraded, 0.5 if degraded else 1.0)

    def sample(self, ts_ms: int, driver_version: str = "sim") -> list[NodeSample]:
        """One record per node for the collection round at ``ts_ms``."""
        return [
            NodeSample(
                node=node,
                ts_ms=ts_ms,
                source="sim",
                driver_version=driver_version,
                gpus=[self._sample_gpu(g) for g in gpus],
            )
            for node, gpus in self.gpus.items()
        ]

    def _sample_gpu(self, gpu: SimGpu) -> GpuSample:
        s, rng = gpu.spec, self._rng
        util = float(rng.uniform(0, 4))
        if gpu.degraded:
            temp = s.slowdown_temp_c - float(rng.uniform(0, 3))
            clock, reasons = s.max_sm_clock_mhz * gpu.true_speed, CLOCK_EVENT_HW_THERMAL
        else:
            temp = float(rng.uniform(32, 45))
            clock, reasons = s.max_sm_clock_mhz, CLOCK_EVENT_IDLE
        total = int(s.mem_gib * _GIB)
        return GpuSample(
            uuid=gpu.uuid,
            index=gpu.index,
            model=s.nvml_name,
            gpu_util_pct=round(util, 1),
            mem_util_pct=round(util / 2, 1),
            mem_used_bytes=int(total * rng.uniform(0.0, 0.02)),
            mem_total_bytes=total,
            sm_active=round(util / 100, 4) if s.has_gpm else None,
            temp_c=round(temp, 1),
            slowdown_temp_c=s.slowdown_temp_c,
            power_w=round(s.power_limit_w * rng.uniform(0.08, 0.15), 1),
            power_limit_w=s.power_limit_w,
            sm_clock_mhz=round(clock),
            max_sm_clock_mhz=s.max_sm_clock_mhz,
            clock_event_reasons=reasons,
            ecc_uncorrected_volatile=0,
            remapped_rows_pending=False,
        )
