"""One simulated GPU at one instant: what NVML would report, and how fast it really is.

Pure: a function of the GPU, the scenario events touching it (with the seconds since
each began) and a seeded generator. Nothing is remembered between samples; episodes
are shaped by time alone, so a sample at any instant can be computed on its own.

Shapes, per event kind (``t`` = seconds since the event began, ``D`` its duration):

- thermal: heat ``p`` rises linearly over ``ramp_s``, holds, and falls over ``ramp_s``
  after ``D``. Temperature = idle + p x (slowdown + 1 - idle). Above p = 0.7 the clock
  falls linearly to ``clock_factor`` x max at p = 1, with SW thermal slowdown (0x20); at
  p >= 0.95 also HW thermal slowdown (0x40).
- power_cap: enforced limit x ``limit_fraction``; SM clock x limit_fraction^(1/3) (power
  grows roughly with the cube of the clock) with SW power cap (0x4).
- noisy_neighbour: another tenant's burst: utilisation, memory, SM activity, power and
  temperature rise; a job placed here gets (1 - ``share``) of the GPU.
- spike: with ``probability`` per sample, 100 % utilisation for that one sample.
- ecc: ``errors`` new volatile uncorrected errors at t = 0 (they stay until reset) and
  rows pending remap (Ampere and newer) for ``D``; the GPU is unusable meanwhile.
- job: a training job (Fairlane's own placements): utilisation, memory and power high
  while it runs; the GPU warms to 10 °C under its slowdown threshold with the thermal
  ramp shape, so it throttles only where something else (a thermal event) adds heat.

True speed = PAL base speed x thermal clock ratio x power clock ratio x (1 - share),
or 0 while an ECC event is active. It is hidden from the samples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from fairlane_events.gpu_models import GpuModelSpec
from fairlane_events.records import GpuSample
from fairlane_sim.scenario import ScenarioEvent

__all__ = [
    "CLOCK_EVENT_HW_THERMAL",
    "CLOCK_EVENT_SW_POWER_CAP",
    "CLOCK_EVENT_SW_THERMAL",
    "DRAWS_PER_SAMPLE",
    "GpuReading",
    "read_gpu",
    "thermal_heat",
]

#: NVML clock-event reason bits (nvmlClocksEventReason*). The idle bit (0x1) is never
#: reported: the real agent masks it out at the source, and so does the simulator.
CLOCK_EVENT_SW_POWER_CAP = 0x4
CLOCK_EVENT_SW_THERMAL = 0x20
CLOCK_EVENT_HW_THERMAL = 0x40

_GIB = 1024**3
_LOAD_BELOW_SLOWDOWN_C = 10.0  # where a healthy GPU settles under a full job

#: Uniform draws one GPU sample consumes, whatever the events: drawing a fixed number
#: (a whole node's at once) is much faster than scalar draws, and it keeps every GPU's
#: noise independent of the events touching the others.
DRAWS_PER_SAMPLE = 9
_REMAPS_ROWS = ("ampere", "ada", "hopper", "blackwell")


@dataclass(frozen=True)
class GpuReading:
    sample: GpuSample
    true_speed: float


def thermal_heat(event: ScenarioEvent, since_s: float) -> float:
    """Heat 0..1 of a thermal episode or a job ``since_s`` after it began (ramp, hold, cool)."""
    ramp = event.ramp_s
    heating = 1.0 if ramp == 0 else min(1.0, since_s / ramp)
    if event.duration_s is None or since_s < event.duration_s:
        return heating
    cooled = since_s - event.duration_s
    return 0.0 if ramp == 0 else max(0.0, 1.0 - cooled / ramp)


def _is_on(event: ScenarioEvent, since_s: float) -> bool:
    return since_s >= 0 and (event.duration_s is None or since_s < event.duration_s)


@dataclass
class _State:
    """The quantities events adjust, starting from an idle, healthy GPU."""

    util: float
    mem_fraction: float
    temp_c: float
    power_fraction: float
    busy: bool = False
    heat: float = 0.0
    load_heat: float = 0.0
    power_factor: float = 1.0
    share: float = 0.0
    tenants: float = 0.0  # the shares of the fractional jobs running on it, summed
    tenants_heat: float = 0.0
    ecc: int = 0
    rows_pending: bool = False
    broken: bool = False


def read_gpu(
    *,
    uuid: str,
    index: int,
    spec: GpuModelSpec,
    base_speed: float,
    idle_temp_c: float,
    events: list[tuple[ScenarioEvent, float]],
    draws: Sequence[float],
) -> GpuReading:
    """The GPU's sample and true speed, given the events that began ``since_s`` ago.

    ``draws``: :data:`DRAWS_PER_SAMPLE` uniform numbers in [0, 1) from a seeded generator.
    """
    u = draws
    idle_temp = idle_temp_c + (u[2] - 0.5)
    s = _State(
        util=4 * u[0], mem_fraction=0.02 * u[1], temp_c=idle_temp, power_fraction=0.08 + 0.07 * u[3]
    )
    for event, since in events:
        _apply(event, since, s, u)
    _load_tenants(s, u)
    s.temp_c = max(
        s.temp_c,
        idle_temp + s.heat * (spec.slowdown_temp_c + 1 - idle_temp),
        idle_temp + s.load_heat * (spec.slowdown_temp_c - _LOAD_BELOW_SLOWDOWN_C - idle_temp),
    )
    thermal_ratio = 1.0 - (1.0 - _thermal_floor(events)) * max(0.0, (s.heat - 0.7) / 0.3)
    power_ratio = s.power_factor ** (1 / 3)
    clock_ratio = thermal_ratio * power_ratio
    reasons = 0
    if s.heat > 0.7:
        reasons |= CLOCK_EVENT_SW_THERMAL
    if s.heat >= 0.95:
        reasons |= CLOCK_EVENT_HW_THERMAL
    if s.power_factor < 1.0:
        reasons |= CLOCK_EVENT_SW_POWER_CAP
    if reasons:
        clock = spec.max_sm_clock_mhz * clock_ratio
    elif s.busy:  # boosting; a slow part of the spread boosts a little lower
        clock = spec.max_sm_clock_mhz * min(1.0, base_speed)
    else:
        # A real idle GPU parks its clock lower; the score ignores the clock while no
        # slowdown reason is set, and reporting max keeps episodes readable.
        clock = spec.max_sm_clock_mhz
    total = int(spec.mem_gib * _GIB)
    limit = spec.power_limit_w * s.power_factor
    sample = GpuSample(
        uuid=uuid,
        index=index,
        model=spec.nvml_name,
        gpu_util_pct=round(s.util, 1),
        mem_util_pct=round(s.util / 2, 1),
        mem_used_bytes=int(total * s.mem_fraction),
        mem_total_bytes=total,
        sm_active=round(min(1.0, s.util / 100), 4) if spec.has_gpm else None,
        temp_c=round(s.temp_c, 1),
        slowdown_temp_c=spec.slowdown_temp_c,
        power_w=round(min(limit, spec.power_limit_w * s.power_fraction), 1),
        power_limit_w=round(limit, 1),
        sm_clock_mhz=round(clock),
        max_sm_clock_mhz=spec.max_sm_clock_mhz,
        clock_event_reasons=reasons,
        ecc_uncorrected_volatile=s.ecc,
        remapped_rows_pending=s.rows_pending if spec.architecture in _REMAPS_ROWS else None,
    )
    speed = 0.0 if s.broken else base_speed * clock_ratio * (1.0 - s.share)
    return GpuReading(sample, speed)


def _load_tenants(s: _State, u: Sequence[float]) -> None:
    """Fractional jobs load the GPU in proportion to their shares, added up: two
    tenants of a half each load it like one whole job."""
    if not s.tenants and not s.tenants_heat:
        return
    load = min(1.0, s.tenants)
    s.load_heat = max(s.load_heat, min(1.0, s.tenants_heat))
    s.util = max(s.util, load * (92 + 8 * u[4]))
    s.mem_fraction = max(s.mem_fraction, load * (0.6 + 0.3 * u[5]))
    s.power_fraction = max(s.power_fraction, load * (0.7 + 0.25 * u[6]))


def _thermal_floor(events: list[tuple[ScenarioEvent, float]]) -> float:
    """The lowest clock factor among the thermal episodes touching the GPU."""
    return min((e.clock_factor for e, _ in events if e.kind == "thermal"), default=1.0)


def _apply(event: ScenarioEvent, since: float, s: _State, u: Sequence[float]) -> None:
    if event.kind == "thermal":
        s.heat = max(s.heat, thermal_heat(event, since))
    elif event.kind == "job" and event.job_share < 1:
        s.tenants_heat += event.job_share * thermal_heat(event, since)
        if _is_on(event, since):
            s.busy, s.tenants = True, s.tenants + event.job_share
    elif event.kind == "job":
        s.load_heat = max(s.load_heat, thermal_heat(event, since))  # warms, holds, cools
        if _is_on(event, since):
            s.busy = True
            s.util = max(s.util, 92 + 8 * u[4])
            s.mem_fraction = max(s.mem_fraction, 0.6 + 0.3 * u[5])
            s.power_fraction = max(s.power_fraction, 0.7 + 0.25 * u[6])
    elif event.kind == "ecc":
        s.ecc += event.errors  # volatile counters keep counting until a reset
        if _is_on(event, since):
            s.rows_pending, s.broken = True, True
    elif not _is_on(event, since):
        return
    elif event.kind == "power_cap":
        s.power_factor = min(s.power_factor, event.limit_fraction)
        s.power_fraction = max(s.power_fraction, event.limit_fraction * 0.97)
    elif event.kind == "noisy_neighbour":
        s.busy, s.share = True, max(s.share, event.share)
        s.util = max(s.util, 70 + 30 * u[4])
        s.mem_fraction = max(s.mem_fraction, event.share * (0.8 + 0.2 * u[5]))
        s.power_fraction = max(s.power_fraction, 0.45 + 0.35 * u[6])
        s.temp_c = max(s.temp_c, 58 + 14 * u[7])
    elif event.kind == "spike" and u[8] < event.probability:
        s.util = 100.0
