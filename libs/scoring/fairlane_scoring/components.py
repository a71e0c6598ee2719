"""Component scores of one GPU sample, each in 0..1 (1 = healthy, free).

Each function is one formula; ``None`` in means "metric not reported" and gives ``None``
out, so the instant score renormalises over what the GPU supports.
"""

from __future__ import annotations

from collections.abc import Mapping

from fairlane_events.records import GpuSample
from fairlane_scoring.config import ScoreConfig

__all__ = [
    "CLOCK_EVENT_IDLE",
    "bandwidth_headroom",
    "clock_health",
    "component_scores",
    "compute_headroom",
    "health_gate",
    "instant_score",
    "memory_headroom",
    "power_headroom",
    "score_sample",
    "thermal_headroom",
]

#: NVML clock-event reason "GPU idle": a clock drop for this reason is not a slowdown.
CLOCK_EVENT_IDLE = 0x1


def _clip01(x: float) -> float:
    return min(1.0, max(0.0, x))


def clock_health(sm_mhz: float | None, max_mhz: float | None, reasons: int | None) -> float | None:
    """sm_mhz / max_mhz while a clock-event reason other than idle is active, else 1."""
    if sm_mhz is None or max_mhz is None or not max_mhz:
        return None
    if reasons is None or not reasons & ~CLOCK_EVENT_IDLE:
        return 1.0
    return _clip01(sm_mhz / max_mhz)


def thermal_headroom(
    temp_c: float | None, slowdown_c: float | None, margin_c: float
) -> float | None:
    """clip((slowdown_c - temp_c) / margin_c, 0, 1): 1 far from the GPU's own slowdown point."""
    if temp_c is None or slowdown_c is None:
        return None
    return _clip01((slowdown_c - temp_c) / margin_c)


def compute_headroom(sm_active: float | None, gpu_util_pct: float | None) -> float | None:
    """1 - sm_active when GPM reports it (Hopper+), else 1 - gpu_util / 100."""
    if sm_active is not None:
        return _clip01(1.0 - sm_active)
    if gpu_util_pct is not None:
        return _clip01(1.0 - gpu_util_pct / 100.0)
    return None


def memory_headroom(used_bytes: int | None, total_bytes: int | None) -> float | None:
    """1 - used / total."""
    if used_bytes is None or not total_bytes:
        return None
    return _clip01(1.0 - used_bytes / total_bytes)


def bandwidth_headroom(mem_util_pct: float | None) -> float | None:
    """1 - memory-controller busy % / 100."""
    return None if mem_util_pct is None else _clip01(1.0 - mem_util_pct / 100.0)


def power_headroom(power_w: float | None, limit_w: float | None) -> float | None:
    """1 - power draw / enforced limit."""
    if power_w is None or not limit_w:
        return None
    return _clip01(1.0 - power_w / limit_w)


def health_gate(sample: GpuSample, previous_ecc: int | None) -> float:
    """0 when the GPU is lost, has row remaps pending, or new uncorrected ECC errors; else 1."""
    if not sample.healthy or sample.remapped_rows_pending:
        return 0.0
    ecc = sample.ecc_uncorrected_volatile
    if ecc is not None and previous_ecc is not None and ecc > previous_ecc:
        return 0.0
    return 1.0


def component_scores(sample: GpuSample, thermal_margin_c: float) -> dict[str, float | None]:
    """All components of one sample, keyed as in ``ScoreConfig.weights``."""
    return {
        "clock": clock_health(
            sample.sm_clock_mhz, sample.max_sm_clock_mhz, sample.clock_event_reasons
        ),
        "thermal": thermal_headroom(sample.temp_c, sample.slowdown_temp_c, thermal_margin_c),
        "compute": compute_headroom(sample.sm_active, sample.gpu_util_pct),
        "memory": memory_headroom(sample.mem_used_bytes, sample.mem_total_bytes),
        "bandwidth": bandwidth_headroom(sample.mem_util_pct),
        "power": power_headroom(sample.power_w, sample.power_limit_w),
    }


def instant_score(
    components: Mapping[str, float | None], weights: Mapping[str, float], gate: float
) -> float:
    """gate x sum(w_i c_i) / sum(w_i) over the components present (not None).

    A GPU that reports nothing scorable gets 0: no evidence is not good evidence.
    """
    present = [(weights[k], c) for k, c in components.items() if c is not None]
    total = sum(w for w, _ in present)
    if total <= 0:
        return 0.0
    return gate * sum(w * c for w, c in present) / total


def score_sample(
    sample: GpuSample, previous_ecc: int | None, config: ScoreConfig
) -> tuple[dict[str, float | None], float]:
    """The components of one sample and its instant score."""
    components = component_scores(sample, config.thermal_margin_c)
    return components, instant_score(components, config.weights, health_gate(sample, previous_ecc))
