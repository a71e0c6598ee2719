"""A simulated fleet that produces node samples shaped exactly like the real agent's.

Deterministic: the same spec, scenario, seed and sequence of ``sample(ts_ms)`` calls give
the same records. Time is an argument; nothing here reads the clock. Scenario times
count from the first sample. Each GPU has a base speed drawn from PAL's measured
same-model spread (:mod:`fairlane_sim.variability`) and, at each sample, a hidden true
speed (:attr:`FleetSimulator.true_speed`) that evaluations compare the score with.

Jobs placed by Fairlane load the GPUs they run on (:meth:`FleetSimulator.start_job`,
:meth:`FleetSimulator.end_job`, safe to call from another thread): the change takes
effect at the next sample, as a "job" event that warms the GPU and cools after the end.

``degraded_fraction`` of the GPUs are thermally degraded from the start (a permanent
thermal event with no ramp): hot, clock held down with the thermal reason bits set,
which is what the score must catch.

``slow_fraction`` of the GPUs are slow but unthrottled: under the job classes in
``slow_classes`` they run at ``slow_speed``, and nothing in their samples shows it (the
persistent, application-specific slowness NVML cannot see, issue 27). Only jobs running
on them notice (:meth:`FleetSimulator.job_speed`), which is what the speed learner must
catch. They are drawn from a random stream of their own, so a fleet without them is the
same fleet as before.
"""

from __future__ import annotations

import uuid
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, replace

import numpy as np

from fairlane_events.gpu_models import CATALOG, GpuModelSpec
from fairlane_events.records import GpuSample, NodeSample
from fairlane_sim.physics import DRAWS_PER_SAMPLE, read_gpu
from fairlane_sim.scenario import Scenario, ScenarioEvent
from fairlane_sim.variability import sample_speeds

__all__ = ["ANY_CLASS", "DEGRADED", "JOB_RAMP_S", "FleetSimulator", "FleetSpec", "SimGpu"]

#: The permanent episode of a degraded GPU: hardware thermal slowdown halves the clock.
DEGRADED = ScenarioEvent(kind="thermal", ramp_s=0.0, clock_factor=0.5)

#: How long a GPU takes to warm up under a job, and to cool after it.
JOB_RAMP_S = 120.0

#: The key of :meth:`FleetSimulator.hidden_speeds` for every class not named in it.
ANY_CLASS = "*"

#: The seed stream of the slow-but-unthrottled GPUs (apart from the fleet's own).
_SLOW_STREAM = 27


@dataclass(frozen=True)
class FleetSpec:
    nodes: int
    gpus_per_node: int = 8
    models: tuple[str, ...] = ("A100-80GB", "H100", "V100")  # catalogue keys, per node
    degraded_fraction: float = 0.05
    seed: int = 0
    node_prefix: str = "sim-node"
    slow_fraction: float = 0.0
    slow_speed: float = 0.5
    slow_classes: tuple[str, ...] = ("compute-bound",)

    def __post_init__(self) -> None:
        if self.nodes < 1 or not 1 <= self.gpus_per_node <= 64:
            raise ValueError("need nodes >= 1 and 1 <= gpus_per_node <= 64")
        unknown = [m for m in self.models if m not in CATALOG]
        if not self.models or unknown:
            raise ValueError(f"models must be catalogue keys, unknown: {unknown}")
        if not 0 <= self.degraded_fraction <= 1:
            raise ValueError("degraded_fraction must be in [0, 1]")
        if not 0 <= self.slow_fraction <= 1 or not 0 < self.slow_speed <= 1:
            raise ValueError("need 0 <= slow_fraction <= 1 and 0 < slow_speed <= 1")
        if ANY_CLASS in self.slow_classes:
            raise ValueError(f"{ANY_CLASS!r} is not a job class")


@dataclass(frozen=True)
class SimGpu:
    node: str
    node_index: int
    index: int
    uuid: str
    spec: GpuModelSpec
    degraded: bool
    base_speed: float  # vs. the median GPU of its model (PAL's spread); hidden
    idle_temp_c: float  # where this GPU sits when nothing happens (its slot's airflow)


class FleetSimulator:
    def __init__(self, spec: FleetSpec, scenario: Scenario | None = None) -> None:
        self.spec = spec
        self.scenario = scenario or Scenario()
        self._rng = np.random.default_rng(spec.seed)
        speeds = iter(sample_speeds(self._rng, spec.nodes * spec.gpus_per_node))
        self.gpus: dict[str, list[SimGpu]] = {}
        for n in range(spec.nodes):
            node = f"{spec.node_prefix}-{n:04d}"
            model = CATALOG[spec.models[n % len(spec.models)]]
            self.gpus[node] = [
                self._make_gpu(node, n, i, model, float(next(speeds)))
                for i in range(spec.gpus_per_node)
            ]
        every = [g for gpus in self.gpus.values() for g in gpus]
        slow_rng = np.random.default_rng([spec.seed, _SLOW_STREAM])
        slow_count = round(spec.slow_fraction * len(every))
        #: The slow-but-unthrottled GPUs (hidden from their samples), by uuid.
        self.slow = frozenset(
            str(u) for u in slow_rng.choice([g.uuid for g in every], slow_count, replace=False)
        )
        self._by_uuid = {g.uuid: g for g in every}
        self._touched: list[tuple[ScenarioEvent, frozenset[str]]] = [
            (DEGRADED, frozenset(g.uuid for g in every if g.degraded))
        ]
        self._touched += [(e, self._choose(e, every)) for e in self.scenario.events]
        self._start_ms: int | None = None
        # Job starts and ends from another thread, applied at the next sample; the live
        # jobs' positions in self._touched, by job id.
        self._job_changes: deque[tuple[str, frozenset[str] | None, int, float]] = deque()
        self._jobs: dict[str, int] = {}
        #: Each GPU's true speed at the last sample (0 = unusable), by uuid.
        self.true_speed: dict[str, float] = {}

    def _make_gpu(
        self, node: str, node_index: int, index: int, model: GpuModelSpec, speed: float
    ) -> SimGpu:
        degraded = bool(self._rng.random() < self.spec.degraded_fraction)
        # Named by the node too: two fleets of one seed and shape on one Kafka (a test
        # session's stacks, two `make run` agents) must not share GPU uuids.
        gpu_uuid = uuid.uuid5(uuid.UUID(bytes=self._rng.bytes(16)), f"{node}/{index}")
        idle_temp_c = float(self._rng.uniform(32, 45))
        return SimGpu(
            node, node_index, index, f"GPU-{gpu_uuid}", model, degraded, speed, idle_temp_c
        )

    def _choose(self, event: ScenarioEvent, every: list[SimGpu]) -> frozenset[str]:
        """The GPUs an event touches: its nodes and GPU indices, then a seeded fraction.

        A "silent" event touches whole nodes: it picks among each node's GPU 0.
        """
        gpus = (0,) if event.kind == "silent" else event.gpus
        pool = [
            g.uuid
            for g in every
            if (event.nodes is None or g.node_index in event.nodes)
            and (gpus is None or g.index in gpus)
        ]
        if event.fraction >= 1 or not pool:
            return frozenset(pool)
        count = max(1, round(event.fraction * len(pool)))
        return frozenset(str(u) for u in self._rng.choice(pool, size=count, replace=False))

    def events_touching(self, uuid: str) -> list[ScenarioEvent]:
        """The scenario's events touching GPU ``uuid`` (its degraded episode included, the
        jobs placed on it not), in scenario order."""
        return [e for e, touched in self._touched if e.kind != "job" and uuid in touched]

    def job_speed(self, uuid: str, job_class: str) -> float:
        """How fast a job of ``job_class`` runs on GPU ``uuid`` against its model's median
        GPU, as far as no sample shows it: PAL's spread, times ``slow_speed`` on a slow GPU
        under one of ``slow_classes``."""
        gpu = self._by_uuid[uuid]
        slow = uuid in self.slow and job_class in self.spec.slow_classes
        return gpu.base_speed * (self.spec.slow_speed if slow else 1.0)

    def hidden_speeds(self) -> dict[str, dict[str, float]]:
        """:meth:`job_speed` of every GPU: ``{uuid: {job class: speed}}``, one entry per slow
        class and :data:`ANY_CLASS` for the others (what simulated jobs read)."""
        return {
            uuid: {c: self.job_speed(uuid, c) for c in (*self.spec.slow_classes, ANY_CLASS)}
            for uuid in self._by_uuid
        }

    def start_job(self, job_id: str, uuids: Iterable[str], ts_ms: int, share: float = 1.0) -> None:
        """A job runs on ``uuids`` from ``ts_ms`` (GPUs of other fleets are ignored),
        holding ``share`` of each (1: whole GPUs; less: a fractional job, whose load is
        in proportion and adds up with its GPU's other tenants')."""
        self._job_changes.append((job_id, frozenset(uuids), ts_ms, share))

    def end_job(self, job_id: str, ts_ms: int) -> None:
        """The job ended at ``ts_ms``; its GPUs cool down over :data:`JOB_RAMP_S`."""
        self._job_changes.append((job_id, None, ts_ms, 1.0))

    def _apply_job_changes(self, elapsed_s: float) -> None:
        assert self._start_ms is not None
        while self._job_changes:
            job_id, uuids, ts_ms, share = self._job_changes.popleft()
            at_s = max(0.0, (ts_ms - self._start_ms) / 1000)
            if uuids is not None and job_id not in self._jobs:
                self._jobs[job_id] = len(self._touched)
                job = ScenarioEvent("job", start_s=at_s, ramp_s=JOB_RAMP_S, job_share=share)
                self._touched.append((job, uuids))
            elif uuids is None and job_id in self._jobs:
                i = self._jobs.pop(job_id)
                event, touched = self._touched[i]
                if at_s <= event.start_s:  # ended before it began in simulated time
                    event, touched = replace(event, ramp_s=0.0), frozenset()
                ran_s = max(1e-3, at_s - event.start_s)
                self._touched[i] = (replace(event, duration_s=ran_s), touched)
        # Forget jobs that have ended and cooled, so that the event list stays short.
        live = set(self._jobs.values())
        kept = [
            (i, (e, t))
            for i, (e, t) in enumerate(self._touched)
            if e.kind != "job"
            or i in live
            or elapsed_s < e.start_s + (e.duration_s or 0) + e.ramp_s
        ]
        if len(kept) < len(self._touched):
            moved = {old: new for new, (old, _) in enumerate(kept)}
            self._touched = [pair for _, pair in kept]
            self._jobs = {job: moved[i] for job, i in self._jobs.items()}

    def sample(self, ts_ms: int, driver_version: str = "sim") -> list[NodeSample]:
        """One record per reporting node for the collection round at ``ts_ms``."""
        if self._start_ms is None:
            self._start_ms = ts_ms
        elapsed_s = (ts_ms - self._start_ms) / 1000
        self._apply_job_changes(elapsed_s)
        records = []
        for gpus in self.gpus.values():
            draws = self._rng.random((len(gpus), DRAWS_PER_SAMPLE)).tolist()
            readings = [self._read(g, elapsed_s, d) for g, d in zip(gpus, draws, strict=True)]
            if self._is_silent(gpus[0], elapsed_s):
                continue
            records.append(
                NodeSample(
                    schema_="node-sample/1",
                    node=gpus[0].node,
                    ts_ms=ts_ms,
                    source="sim",
                    driver_version=driver_version,
                    gpus=readings,
                )
            )
        return records

    def _events_of(self, gpu: SimGpu, elapsed_s: float) -> list[tuple[ScenarioEvent, float]]:
        return [
            (event, elapsed_s - event.start_s)
            for event, touched in self._touched
            if gpu.uuid in touched and elapsed_s >= event.start_s
        ]

    def _read(self, gpu: SimGpu, elapsed_s: float, draws: list[float]) -> GpuSample:
        reading = read_gpu(
            uuid=gpu.uuid,
            index=gpu.index,
            spec=gpu.spec,
            base_speed=gpu.base_speed,
            idle_temp_c=gpu.idle_temp_c,
            events=self._events_of(gpu, elapsed_s),
            draws=draws,
        )
        self.true_speed[gpu.uuid] = reading.true_speed
        return reading.sample

    def _is_silent(self, first_gpu: SimGpu, elapsed_s: float) -> bool:
        """A node stops reporting while a "silent" event touching its GPUs is active."""
        return any(
            e.kind == "silent" and e.is_active(elapsed_s) and first_gpu.uuid in touched
            for e, touched in self._touched
        )
