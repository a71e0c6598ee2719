"""The fleet the extender benchmark (bench/extender.py) judges, and its traffic.

``realistic`` (the default): 12,500 nodes of 8 GPUs in the states a large fleet is in
on an ordinary day, each in a proportion that is stated here, so the filter passes most
candidates and explains a few hundred of them for several different reasons:

- GPUs: healthy ones score 0.70-1.00; 4% are degraded (0.30-0.64, below the 0.65
  threshold); a new record turns a healthy GPU degraded with probability 0.2% and a
  degraded one healthy with 5% (4% degraded at any time), so GPUs keep falling below
  and recovering (then cooling for the 120 s window);
  3% start the run cooling, their recoveries spread over the last 120 s, so cooling
  windows end while it runs.
- Nodes: 1% cordoned; 1% with their agent down (last record 10 minutes old, stale;
  no new records); 2% running hot (every GPU 0.45-0.64).
- Fairlane's own placements hold 4-8 GPUs on 15% of the nodes; between calls a few
  holds are taken or let go.
- Records: a 100k-GPU fleet scored every 30 s (the agents' default interval) sends
  3,333 records a second, so the 500 applied between two calls (a pod every 150 ms)
  advance the clock by 150 ms.

``meltdown``: the worst case the benchmark measured before (the figures of
docs/benchmarks-history.md until 2026-12-01 17:00): every score uniform in 0.30-1.00 (half the
records below the threshold), a clock that moves 1 ms per call so no cooling ever ends,
no cordons, holds or stale agents; the failed candidates grow from 160 to 2,000 of
5,000.

Both are seeded; time is an argument.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from fairlane_events.records import GpuScore
from fairlane_scheduler.core.fleet import FleetView

__all__ = ["FLEETS", "Traffic"]

FLEETS = ("realistic", "meltdown")
GPUS_PER_NODE = 8
MODELS = ("NVIDIA H100 80GB HBM3", "NVIDIA A100-SXM4-80GB")
RECORDS_PER_S = 100_000 // 30  # 100k GPUs, each scored every 30 s (the agents' interval)


@dataclass
class Traffic:
    """Score records and placement holds for one fleet; ``kind`` in :data:`FLEETS`."""

    kind: str
    gpus: int
    rng: np.random.Generator

    def __post_init__(self) -> None:
        nodes = self.gpus // GPUS_PER_NODE
        node_kind = self.rng.choice(4, size=nodes, p=[0.96, 0.01, 0.01, 0.02])
        if self.kind == "meltdown":
            node_kind[:] = 0
        self.cordoned = frozenset(f"node-{n:05d}" for n in np.flatnonzero(node_kind == 1))
        self._down = np.repeat(node_kind == 2, GPUS_PER_NODE)  # agent down: no records
        self._hot = np.repeat(node_kind == 3, GPUS_PER_NODE)
        self._degraded = self.rng.random(self.gpus) < 0.04

    def ms_per_call(self, records: int) -> int:
        """How far the clock moves while ``records`` records arrive."""
        return 1 if self.kind == "meltdown" else records * 1000 // RECORDS_PER_S

    def load(self, fleet: FleetView, now_ms: int) -> None:
        """Every GPU's history up to ``now_ms``, and the placements' holds."""
        if self.kind == "realistic":
            cooling = self.rng.random(self.gpus) < 0.03
            for i in np.flatnonzero(cooling & ~self._down).tolist():
                fleet.apply(self.record(i, now_ms - 300_000, score=0.4))
                back_ms = now_ms - int(self.rng.integers(0, 120_000))
                fleet.apply(self.record(i, back_ms, score=0.9))
        for i in range(self.gpus):
            old = self.kind == "realistic" and self._down[i]
            fleet.apply(self.record(i, now_ms - 600_000 if old else now_ms))
        fleet.cordoned = self.cordoned
        if self.kind == "realistic":
            nodes = self.gpus // GPUS_PER_NODE
            for node in np.flatnonzero(self.rng.random(nodes) < 0.15).tolist():
                for slot in range(int(self.rng.integers(4, GPUS_PER_NODE + 1))):
                    fleet.hold(f"GPU-{node * GPUS_PER_NODE + slot:06d}")

    def step(self, fleet: FleetView, records: int, now_ms: int) -> None:
        """The score records that arrive between two calls."""
        if self.kind == "meltdown":
            for i in self.rng.integers(0, self.gpus, records).tolist():
                fleet.apply(self.record(i, now_ms))
            return
        live = np.flatnonzero(~self._down)
        picked = live[self.rng.integers(0, len(live), records)]
        odds = np.where(self._degraded[picked], 0.05, 0.002)  # about 4% degraded, steadily
        flips = picked[self.rng.random(records) < odds]
        self._degraded[flips] = ~self._degraded[flips]
        for i in picked.tolist():
            fleet.apply(self.record(i, now_ms))

    def placements(self, fleet: FleetView) -> None:
        """Fairlane's placements between two calls: a few GPUs taken or let go."""
        if self.kind == "realistic":
            for i in self.rng.integers(0, self.gpus, 5).tolist():
                fleet.hold(f"GPU-{i:06d}", held=bool(self.rng.random() < 0.5))

    def record(self, i: int, ts_ms: int, *, score: float | None = None) -> GpuScore:
        if score is None:
            score = self._score(i)
        return GpuScore(
            schema_="gpu-score/1",
            node=f"node-{i // GPUS_PER_NODE:05d}",
            uuid=f"GPU-{i:06d}",
            index=i % GPUS_PER_NODE,
            model=MODELS[(i // GPUS_PER_NODE) % 2],
            score=score,
            speed=2.0,
            effective_capacity=2 * score,
            components={},
            samples_in_window=0 if self._down[i] and self.kind == "realistic" else 5,
            stale=bool(self._down[i]) and self.kind == "realistic",
            mem_total_bytes=80 * 1024**3,
            ts_ms=ts_ms,
        )

    def _score(self, i: int) -> float:
        if self.kind == "meltdown":
            return float(self.rng.uniform(0.3, 1.0))
        if self._hot[i]:
            return float(self.rng.uniform(0.45, 0.64))
        if self._degraded[i]:
            return float(self.rng.uniform(0.3, 0.64))
        return float(self.rng.uniform(0.7, 1.0))
