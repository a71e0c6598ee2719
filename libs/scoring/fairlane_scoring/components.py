"""Component scores of one GPU sample, each in 0..1 (1 = healthy, free).

Each function is one formula; ``None`` in means "metric not reported" and gives ``None``
out, so the instant score renormalises over what the GPU supports
(:mod:`fairlane_scoring.combine`).
"""

from __future__ import annotations

from fairlane_events.records import GpuSample
from fairlane_scoring.allocation import NOTHING_HELD, Held

__all__ = [
    "CLOCK_EVENT_IDLE",
    "Components",
    "bandwidth_headroom",
    "clock_health",
    "component_scores",
    "compute_headroom",
    "health_gate",
    "memory_headroom",
    "power_headroom",
    "thermal_headroom",
]

#: NVML clock-event reason "GPU idle": a clock drop for this reason is not a slowdown.
CLOCK_EVENT_IDLE = 0x1

#: One value per component, in ``fairlane_scoring.config.COMPONENTS`` order.
Components = tuple[float | None, ...]


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


def _beyond(load: float, held: float) -> float:
    """1 - max(0, load - held): the headroom left by the load beyond what Fairlane's
    fractional tenants hold (held 0: 1 - load)."""
    return _clip01(1.0 - max(0.0, load - held))


def compute_headroom(
    sm_active: float | None, gpu_util_pct: float | None, held_share: float = 0.0
) -> float | None:
    """1 - max(0, sm_active - held_share) when GPM reports it (Hopper+), else
    1 - max(0, gpu_util / 100 - held_share)."""
    if sm_active is not None:
        return _beyond(sm_active, held_share)
    if gpu_util_pct is not None:
        return _beyond(gpu_util_pct / 100.0, held_share)
    return None


def memory_headroom(
    used_bytes: int | None, total_bytes: int | None, held_bytes: int = 0
) -> float | None:
    """1 - max(0, used - held_bytes) / total."""
    if used_bytes is None or not total_bytes:
        return None
    return _clip01(1.0 - max(0, used_bytes - held_bytes) / total_bytes)


def bandwidth_headroom(mem_util_pct: float | None, held_share: float = 0.0) -> float | None:
    """1 - max(0, memory-controller busy % / 100 - held_share)."""
    return None if mem_util_pct is None else _beyond(mem_util_pct / 100.0, held_share)


def power_headroom(
    power_w: float | None, limit_w: float | None, held_share: float = 0.0
) -> float | None:
    """1 - max(0, power draw / enforced limit - held_share)."""
    if power_w is None or not limit_w:
        return None
    return _beyond(power_w / limit_w, held_share)


def health_gate(sample: GpuSample, previous_ecc: int | None) -> float:
    """0 when the GPU is lost, has row remaps pending, or more uncorrected volatile ECC
    errors than at ``previous_ecc`` (the last reported count); else 1."""
    if not sample.healthy or sample.remapped_rows_pending:
        return 0.0
    ecc = sample.ecc_uncorrected_volatile
    if ecc is not None and previous_ecc is not None and ecc > previous_ecc:
        return 0.0
    return 1.0


def component_scores(
    sample: GpuSample, thermal_margin_c: float, held: Held = NOTHING_HELD
) -> Components:
    """All components of one sample, in ``COMPONENTS`` order (None: not reported); the
    load ones count only the load beyond what Fairlane's fractional tenants ``held`` at
    the sample's time (compute, bandwidth and power by their compute share, memory by
    their memory)."""
    share = held.share
    return (
        clock_health(sample.sm_clock_mhz, sample.max_sm_clock_mhz, sample.clock_event_reasons),
        thermal_headroom(sample.temp_c, sample.slowdown_temp_c, thermal_margin_c),
        compute_headroom(sample.sm_active, sample.gpu_util_pct, share),
        memory_headroom(sample.mem_used_bytes, sample.mem_total_bytes, held.memory_bytes),
        bandwidth_headroom(sample.mem_util_pct, share),
        power_headroom(sample.power_w, sample.power_limit_w, share),
    )
