"""What Fairlane's scheduler would know: each GPU's score, from simulated NVML samples.

Every GPU is sampled on a grid of ``interval_s`` (tick k at k x interval_s), its samples
go through the streaming scorer's own per-GPU window (``fairlane_scorer.core.window``,
which the parity test holds equal to the reference score), and each score becomes the
record the scores topic would carry (``fairlane_scorer.core.records.score_record``).

Sampling is lazy, and exact: a GPU's samples are stationary between the times its
physics changes (an episode's breakpoints, a job's start or end), so once its score has
settled it is not sampled again until the next change. When it is needed again at tick
T, the ticks it missed inside ``T - backfill`` are sampled then, in order, with the noise
of those very ticks (each tick's draws come from a counter-based generator keyed by
(seed, GPU, tick)), so the window is the one dense sampling would have built. A test
holds lazy and dense sampling equal.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from fairlane_eval.core.cluster import HiddenFleet, job_event
from fairlane_eval.core.faults import episode_end_s
from fairlane_events.records import GpuScore
from fairlane_scorer.core.records import score_record
from fairlane_scorer.core.window import GpuWindow, accept_sample, score_window
from fairlane_scoring.allocation import Allocation, load_since_ms
from fairlane_scoring.config import ScoreConfig
from fairlane_sim.physics import DRAWS_PER_SAMPLE
from fairlane_sim.scenario import ScenarioEvent

__all__ = ["EPOCH_MS", "ScoreKeeper", "tick_draws"]

#: Simulated time 0 as epoch milliseconds (records need a positive ts_ms).
EPOCH_MS = 1_700_000_000_000
_DRAWS_PER_TICK = 12  # three Philox blocks of four 64-bit words, so ticks align to blocks


def tick_draws(seed: int, row: int, first_tick: int, last_tick: int) -> npt.NDArray[np.float64]:
    """The uniform draws of GPU ``row`` at ticks ``first_tick..last_tick`` (one row each):
    the same numbers for a tick whatever range it is drawn in."""
    counter = [(first_tick + 2**40) * (_DRAWS_PER_TICK // 4), row, 0, 0]
    gen = np.random.Generator(np.random.Philox(key=seed, counter=counter))
    n = last_tick - first_tick + 1
    draws: npt.NDArray[np.float64] = gen.random((n, _DRAWS_PER_TICK))[:, :DRAWS_PER_SAMPLE]
    return draws


@dataclass
class _Track:
    window: GpuWindow | None = None
    last_tick: int | None = None
    jobs: list[ScenarioEvent] = field(default_factory=list)
    allocations: list[Allocation] = field(default_factory=list)


class ScoreKeeper:
    """Per-GPU scorer windows over the hidden fleet's simulated samples."""

    def __init__(self, fleet: HiddenFleet, config: ScoreConfig, seed: int) -> None:
        self.fleet = fleet
        self.config = config
        self.seed = seed
        self.interval_s = config.interval_s
        #: Ticks sampled before the one asked for: the history window plus the spike
        #: filter's, so that every sample inside the history is filtered as densely.
        self.backfill_ticks = math.ceil(config.history_s / self.interval_s) + config.hampel_window
        self._tracks = [_Track() for _ in fleet.gpus]
        self.samples_taken = 0

    @property
    def settle_s(self) -> float:
        """Seconds after the GPU's physics last changed until its score is stationary."""
        return self.config.history_s + self.config.hampel_window * self.interval_s

    def window(self, row: int) -> GpuWindow | None:
        """The scorer's window of GPU ``row`` as of its last sampled tick."""
        return self._tracks[row].window

    def job_started(self, row: int, t_s: float) -> None:
        track = self._tracks[row]
        track.jobs.append(job_event(t_s, None))
        track.allocations.append(Allocation(_ms(t_s)))

    def job_ended(self, row: int, t_s: float) -> None:
        track = self._tracks[row]
        start = track.jobs.pop()
        track.jobs.append(job_event(start.start_s, t_s))
        held = track.allocations.pop()
        track.allocations.append(Allocation(held.start_ms, _ms(t_s)))
        horizon_s = t_s - self.config.history_s - self.backfill_ticks * self.interval_s
        track.jobs = [j for j in track.jobs if episode_end_s(j) >= horizon_s]
        track.allocations = [
            a for a in track.allocations if a.end_ms is None or a.end_ms >= _ms(horizon_s)
        ]

    def advance(self, row: int, tick: int) -> list[GpuScore]:
        """Sample GPU ``row`` up to ``tick`` and return the score record of every tick
        sampled now (none when it was already sampled at ``tick``)."""
        track = self._tracks[row]
        first = tick - self.backfill_ticks
        start = first if track.last_tick is None else track.last_tick + 1
        if start < first:  # a gap longer than the backfill: what came before is history
            track.window, start = None, first
        if start > tick:
            return []
        gpu = self.fleet.gpus[row]
        draws = tick_draws(self.seed, row, start, tick).tolist()
        records = []
        window = track.window
        for k in range(start, tick + 1):
            t_s = k * self.interval_s
            ts_ms = _ms(t_s)
            reading = self.fleet.read(row, t_s, track.jobs, draws[k - start])
            since = load_since_ms(track.allocations, ts_ms)
            window = accept_sample(
                window, gpu.node, ts_ms, reading.sample, load_since_ms=since, config=self.config
            )
            assert window is not None  # ticks only move forward
            result = score_window(window, ts_ms, since, self.config)
            records.append(score_record(gpu.uuid, window, result))
        self.samples_taken += tick + 1 - start
        track.window, track.last_tick = window, tick
        return records


def _ms(t_s: float) -> int:
    return EPOCH_MS + round(t_s * 1000)
