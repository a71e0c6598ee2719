"""Fail-slow episodes of the hidden fleet: when each GPU is slow, how badly, and why.

Each kind is a Poisson process per GPU (``rate_per_gpu_day``) with log-normal durations
(``median_s``, ``sigma``, clipped to ``[min_s, max_s]``) and a severity drawn uniformly
from ``severity``. The episodes are :class:`fairlane_sim.scenario.ScenarioEvent` values,
so the fleet simulator's physics (the code the agent runs) turns them into what NVML
would report and into the GPU's true speed:

- thermal: heat ramps up, the SM clock falls to ``clock_factor`` x max with the thermal
  clock-event reasons set (severity = clock_factor);
- power_cap: an enforced limit below the default one (severity = limit_fraction);
- noisy_neighbour: another tenant's burst takes ``share`` of the GPU (severity = share);
- ecc: new uncorrected ECC errors, rows pending remap; unusable until reset.

The defaults and the studies behind them are in docs/evaluation.md ("The hidden fleet").
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

import numpy as np

from fairlane_sim.scenario import EventKind, ScenarioEvent

__all__ = ["DEFAULT_FAULTS", "EpisodeKind", "FaultModel", "draw_episodes"]


@dataclass(frozen=True)
class EpisodeKind:
    rate_per_gpu_day: float
    median_s: float
    sigma: float  # of log(duration)
    min_s: float
    max_s: float
    severity: tuple[float, float]  # uniform range of the kind's parameter
    ramp_s: float = 0.0  # thermal only: heating and cooling time

    def __post_init__(self) -> None:
        if self.rate_per_gpu_day < 0 or not 0 < self.min_s <= self.median_s <= self.max_s:
            raise ValueError("need rate >= 0 and 0 < min_s <= median_s <= max_s")
        low, high = self.severity
        if not 0 < low <= high <= 1:
            raise ValueError("severity must be a range inside (0, 1]")


#: Per GPU-day rates and durations; docs/evaluation-sources.md quotes the studies behind
#: each number and marks what is an assumption.
DEFAULT_FAULTS: Mapping[str, EpisodeKind] = MappingProxyType(
    {
        # Falcon (ATC'25): GPU fail-slows on < 2 % of nodes, mean ~10 min, up to ~10 h;
        # 2 degradations in ~87 GPU-days of probing. Median 200 s, sigma 1.5: mean ~10 min.
        "thermal": EpisodeKind(0.023, 200.0, 1.5, 30.0, 36_000.0, (0.65, 0.9), ramp_s=120.0),
        # No published rate found: an assumption, at half the thermal rate.
        "power_cap": EpisodeKind(0.01, 1800.0, 1.0, 300.0, 36_000.0, (0.6, 0.85)),
        # Assumption anchored on Falcon's CPU-contention rate (~0.046 per GPU).
        "noisy_neighbour": EpisodeKind(0.05, 300.0, 1.2, 60.0, 14_400.0, (0.2, 0.6)),
        # Llama 3: 268 GPU-attributed interruptions in 884,736 GPU-days (3e-4 per GPU-day);
        # repair time (reset or reboot) is an assumption.
        "ecc": EpisodeKind(3e-4, 1800.0, 1.2, 300.0, 86_400.0, (1.0, 1.0)),
    }
)


@dataclass(frozen=True)
class FaultModel:
    kinds: Mapping[str, EpisodeKind] = field(default_factory=lambda: DEFAULT_FAULTS)
    rate_scale: float = 1.0  # multiplies every kind's rate (the sweep's axis)

    def __post_init__(self) -> None:
        if self.rate_scale < 0:
            raise ValueError("rate_scale must be >= 0")

    def scaled(self, rate_scale: float) -> FaultModel:
        return replace(self, rate_scale=rate_scale)


def _event(
    kind: str, spec: EpisodeKind, start_s: float, duration_s: float, sev: float
) -> ScenarioEvent:
    name: EventKind = kind  # type: ignore[assignment]
    if kind == "thermal":
        return ScenarioEvent(name, start_s, duration_s, clock_factor=sev, ramp_s=spec.ramp_s)
    if kind == "power_cap":
        return ScenarioEvent(name, start_s, duration_s, limit_fraction=sev)
    if kind == "noisy_neighbour":
        return ScenarioEvent(name, start_s, duration_s, share=min(sev, 0.99))
    if kind == "ecc":
        return ScenarioEvent(name, start_s, duration_s)
    raise ValueError(f"unknown episode kind {kind!r}")


def draw_episodes(
    rng: np.random.Generator, gpus: int, horizon_s: float, model: FaultModel
) -> list[list[ScenarioEvent]]:
    """Each GPU's episodes starting in ``[0, horizon_s)``, in start order."""
    per_gpu: list[list[ScenarioEvent]] = [[] for _ in range(gpus)]
    days = horizon_s / 86_400
    for kind in sorted(model.kinds):
        spec = model.kinds[kind]
        counts = rng.poisson(spec.rate_per_gpu_day * model.rate_scale * days, size=gpus)
        total = int(counts.sum())
        starts = rng.uniform(0, horizon_s, total)
        durations = np.clip(
            spec.median_s * np.exp(spec.sigma * rng.standard_normal(total)), spec.min_s, spec.max_s
        )
        severities = rng.uniform(*spec.severity, total)
        owners = np.repeat(np.arange(gpus), counts)
        for g, start, duration, sev in zip(owners, starts, durations, severities, strict=True):
            per_gpu[g].append(_event(kind, spec, float(start), float(duration), float(sev)))
    for events in per_gpu:
        events.sort(key=lambda e: e.start_s)
    return per_gpu


def episode_end_s(event: ScenarioEvent) -> float:
    """When the episode stops touching the GPU's speed and samples (cooling included)."""
    if event.duration_s is None:
        return math.inf
    return (
        event.start_s + event.duration_s + (event.ramp_s if event.kind in ("thermal", "job") else 0)
    )
