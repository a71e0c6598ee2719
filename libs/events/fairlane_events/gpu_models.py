"""The GPU-model catalogue: what each model is, as public datasheets state it.

Agents report NVML's product name ("NVIDIA H100 80GB HBM3", "Tesla V100-SXM2-32GB");
:func:`find_model` maps such a name to a catalogue entry. ``relative_speed`` is a prior,
not a measurement of any job: the geometric mean of dense FP16/BF16 tensor throughput
and memory bandwidth, both relative to the A100 40 GB. Compute-bound jobs gain more than
this between generations, memory-bound jobs less (Gavel's data shows the spread).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

__all__ = ["CATALOG", "DEFAULT_SPEED", "GpuModelSpec", "find_model"]


@dataclass(frozen=True)
class GpuModelSpec:
    key: str
    nvml_name: str  # the product name NVML reports for the common variant
    tensor_tflops: float  # dense FP16/BF16 tensor, no sparsity
    mem_gib: float
    bandwidth_gbs: float
    max_sm_clock_mhz: float
    power_limit_w: float
    slowdown_temp_c: float
    architecture: str

    @property
    def has_gpm(self) -> bool:
        """GPU Performance Monitoring (SM activity) exists on Hopper and newer."""
        return self.architecture in ("hopper", "blackwell")

    @property
    def relative_speed(self) -> float:
        ref = _REFERENCE
        return math.sqrt(
            (self.tensor_tflops / ref.tensor_tflops) * (self.bandwidth_gbs / ref.bandwidth_gbs)
        )


_REFERENCE = GpuModelSpec(
    "A100-40GB", "NVIDIA A100-SXM4-40GB", 312, 40, 1555, 1410, 400, 92, "ampere"
)

# K80 and P100 have no tensor cores: their "tensor" figure is the fastest dense rate they
# have, FP32 for the K80 (8.73 TFLOPS boost per two-GPU board, 4.37 per GPU NVML sees) and
# packed FP16 for the P100 (21.2 TFLOPS). The K80's 12 GiB, 240 GB/s and 150 W are per GPU
# too (the board's 24 GB, 480 GB/s and 300 W halved). Their slowdown temperatures are what
# nvidia-smi reports on them, not a datasheet figure.
CATALOG: dict[str, GpuModelSpec] = {
    spec.key: spec
    for spec in (
        GpuModelSpec("K80", "Tesla K80", 4.37, 12, 240, 875, 150, 88, "kepler"),
        GpuModelSpec("P100", "Tesla P100-SXM2-16GB", 21.2, 16, 732, 1480, 300, 82, "pascal"),
        GpuModelSpec("T4", "Tesla T4", 65, 16, 320, 1590, 70, 90, "turing"),
        GpuModelSpec("V100", "Tesla V100-SXM2-32GB", 125, 32, 900, 1530, 300, 87, "volta"),
        _REFERENCE,
        GpuModelSpec("A100-80GB", "NVIDIA A100-SXM4-80GB", 312, 80, 2039, 1410, 400, 92, "ampere"),
        GpuModelSpec("L4", "NVIDIA L4", 121, 24, 300, 2040, 72, 92, "ada"),
        GpuModelSpec("L40S", "NVIDIA L40S", 362, 48, 864, 2520, 350, 92, "ada"),
        GpuModelSpec("H100", "NVIDIA H100 80GB HBM3", 989, 80, 3350, 1980, 700, 90, "hopper"),
        GpuModelSpec("H200", "NVIDIA H200", 989, 141, 4800, 1980, 700, 90, "hopper"),
        GpuModelSpec("B200", "NVIDIA B200", 2250, 180, 8000, 1965, 1000, 90, "blackwell"),
    )
}

#: Relative speed assumed for a model not in the catalogue (with a warning by the caller).
DEFAULT_SPEED = 1.0

# Most specific first: "L40S" must win over "L4", "A100 ... 80GB" over "A100".
_PATTERNS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p), key)
    for p, key in (
        (r"\bB200\b", "B200"),
        (r"\bH200\b", "H200"),
        (r"\bH100\b", "H100"),
        (r"\bL40S\b", "L40S"),
        (r"\bL4\b", "L4"),
        (r"\bA100\b.*\b80\s?GB\b", "A100-80GB"),
        (r"\bA100\b", "A100-40GB"),
        (r"\bV100\b", "V100"),
        (r"\bT4\b", "T4"),
        (r"\bP100\b", "P100"),
        (r"\bK80\b", "K80"),
    )
)


def find_model(name: str) -> GpuModelSpec | None:
    """The catalogue entry for an NVML product name or catalogue key, or None if unknown."""
    if name in CATALOG:
        return CATALOG[name]
    upper = name.upper().replace("-", " ")
    for pattern, key in _PATTERNS:
        if pattern.search(upper):
            return CATALOG[key]
    return None
