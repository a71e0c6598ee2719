"""One throttled GPU over time: what it really does, and what Fairlane sees and decides."""

from __future__ import annotations

from dataclasses import dataclass

from fairlane_eval.core.cluster import HiddenFleet, HiddenGpu
from fairlane_eval.core.telemetry import ScoreKeeper
from fairlane_events.gpu_models import CATALOG
from fairlane_scheduler.core.fleet import FleetView, StabilityPolicy
from fairlane_scoring.config import ScoreConfig
from fairlane_sim.scenario import ScenarioEvent

__all__ = ["Timeline", "throttled_gpu_timeline"]

_INSTANT = 2  # KEPT_COLUMNS: ts_ms, gate, instant, instant_load_masked


@dataclass(frozen=True)
class Timeline:
    title: str
    t_s: tuple[float, ...]
    true_speed: tuple[float, ...]
    instant: tuple[float, ...]
    score: tuple[float, ...]
    cooling: tuple[bool, ...]


def throttled_gpu_timeline(
    config: ScoreConfig,
    stabilization_s: float,
    *,
    model: str = "H100",
    episode: ScenarioEvent | None = None,
    end_s: float = 3600.0,
    seed: int = 0,
) -> Timeline:
    """A free GPU through one thermal episode (default: 20 minutes from t = 10 min,
    clock to 0.6 x max), sampled every ``config.interval_s``."""
    episode = episode or ScenarioEvent(
        "thermal", start_s=600.0, duration_s=1200.0, ramp_s=120.0, clock_factor=0.6
    )
    gpu = HiddenGpu(0, "node-0000", 0, "GPU-timeline", CATALOG[model], 1.0, 38.0)
    fleet = HiddenFleet([gpu], [[episode]])
    keeper = ScoreKeeper(fleet, config, seed)
    view = FleetView(StabilityPolicy(config.threshold, stabilization_s))
    t, speed, instant, score, cooling = [], [], [], [], []
    for tick in range(int(end_s / config.interval_s) + 1):
        for record in keeper.advance(0, tick):
            view.apply(record)
            window = keeper.window(0)
            t.append(tick * config.interval_s)
            speed.append(fleet.true_speed(0, tick * config.interval_s))
            instant.append(float(window.kept[-1, _INSTANT]) if window is not None else 0.0)
            score.append(record.score)
            cooling.append(bool(view.cooling(record.ts_ms)[0]) or record.score < config.threshold)
    title = (
        f"{model}: thermal episode at {episode.start_s / 60:.0f}-"
        f"{(episode.start_s + (episode.duration_s or 0)) / 60:.0f} min, clock "
        f"{episode.clock_factor:.2f} x max; samples every {config.interval_s:.0f} s"
    )
    return Timeline(title, tuple(t), tuple(speed), tuple(instant), tuple(score), tuple(cooling))
