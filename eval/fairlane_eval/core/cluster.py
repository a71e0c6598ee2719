"""The hidden fleet: every GPU's model, persistent speed factor and fail-slow episodes.

Optionally (``class_speeds``) each GPU also has a persistent speed factor per job class
(:data:`fairlane_sim.class_speeds.CLASSES`), multiplying its speed for jobs of that class.

Nothing here is visible to a policy except through what it is allowed to see: the
simulated NVML samples (for Fairlane's scorer) or the true speed (for the oracle). Both
come from :func:`fairlane_sim.physics.read_gpu`, the physics the agent's simulated fleet
runs, given the GPU's episodes and the jobs placed on it.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from fairlane_eval.core.cluster_spec import ClusterSpec, NodeGroup
from fairlane_eval.core.faults import FaultModel, draw_episodes, episode_end_s
from fairlane_eval.core.fleet_variability import Variability, speeds_for_model
from fairlane_eval.core.job_classes import job_class
from fairlane_events.gpu_models import CATALOG, GpuModelSpec
from fairlane_sim.class_speeds import CLASSES, sample_class_speeds
from fairlane_sim.fleet import JOB_RAMP_S, FleetSimulator, FleetSpec
from fairlane_sim.physics import DRAWS_PER_SAMPLE, GpuReading, read_gpu
from fairlane_sim.scenario import Scenario, ScenarioEvent

__all__ = ["ClusterSpec", "HiddenFleet", "HiddenGpu", "NodeGroup", "job_event"]

_NO_NOISE = (0.5,) * DRAWS_PER_SAMPLE


@dataclass(frozen=True)
class HiddenGpu:
    row: int  # position in HiddenFleet.gpus
    node: str
    index: int
    uuid: str
    spec: GpuModelSpec
    base_speed: float  # persistent factor vs the median GPU of its model
    idle_temp_c: float


def job_event(start_s: float, end_s: float | None) -> ScenarioEvent:
    """A job's load on its GPUs, as the fleet simulator models it (warms, holds, cools)."""
    duration = None if end_s is None else max(1e-3, end_s - start_s)
    return ScenarioEvent("job", start_s=start_s, duration_s=duration, ramp_s=JOB_RAMP_S)


class HiddenFleet:
    def __init__(
        self,
        gpus: Sequence[HiddenGpu],
        episodes: Sequence[Sequence[ScenarioEvent]],
        class_speeds: npt.NDArray[np.float64] | None = None,
    ):
        """``class_speeds``: optional (GPUs, CLASSES) persistent factors per job class."""
        if len(gpus) != len(episodes):
            raise ValueError("one episode list per GPU")
        if class_speeds is not None and class_speeds.shape != (len(gpus), len(CLASSES)):
            raise ValueError(f"class_speeds must be (GPUs, {len(CLASSES)}): one column a class")
        self.gpus = tuple(gpus)
        self.episodes = tuple(tuple(e) for e in episodes)
        self.class_speeds = class_speeds

    @classmethod
    def build(
        cls,
        spec: ClusterSpec,
        variability: Variability,
        faults: FaultModel,
        horizon_s: float,
        seed: int,
        *,
        class_speeds: bool = False,
    ) -> HiddenFleet:
        """A fleet whose GPUs draw persistent speeds from ``variability`` (measured
        same-model spread) and episodes from ``faults`` over ``horizon_s``; all from
        ``seed``. Nodes of different models are shuffled together, so that first fit by
        name favours no model.

        ``class_speeds``: each node also draws its GPUs' per-class factors from PAL's
        Longhorn measurements (:func:`fairlane_sim.class_speeds.sample_class_speeds`,
        measured nodes kept whole), from a generator of its own so that the rest of the
        fleet is the one drawn without them. Longhorn is V100s: giving other models the
        same relative draws assumes their per-class spread is alike (unmeasured)."""
        rng = np.random.default_rng(seed)
        nodes = [(g.model, g.gpus_per_node) for g in spec.groups for _ in range(g.nodes)]
        rng.shuffle(nodes)  # draws as the list of models it was, so fleets are unchanged
        gpus: list[HiddenGpu] = []
        for n, (model, size) in enumerate(nodes):
            measured = np.sort(np.asarray(speeds_for_model(variability, model), dtype=np.float64))
            node = f"node-{n:04d}"
            for i in range(size):
                speed = float(np.quantile(measured, rng.random()))
                idle = float(rng.uniform(32, 45))
                uuid = f"GPU-{seed:04x}-{len(gpus):06d}"
                gpus.append(HiddenGpu(len(gpus), node, i, uuid, CATALOG[model], speed, idle))
        episodes = draw_episodes(rng, len(gpus), horizon_s, faults)
        if not class_speeds:
            return cls(gpus, episodes)
        class_rng = np.random.default_rng([seed, 27])
        factors = [sample_class_speeds(class_rng, 1, size) for _, size in nodes]
        return cls(gpus, episodes, np.concatenate(factors))

    @classmethod
    def from_simulator(cls, spec: FleetSpec, scenario: Scenario) -> HiddenFleet:
        """The agent's simulated fleet for ``spec`` and ``scenario``: the same GPUs (uuids,
        base speeds) and the same events touching each, as ``fairlane-agent --simulate``."""
        sim = FleetSimulator(spec, scenario)
        episodes: list[list[ScenarioEvent]] = []
        gpus: list[HiddenGpu] = []
        for node_gpus in sim.gpus.values():
            for g in node_gpus:
                gpus.append(
                    HiddenGpu(
                        len(gpus), g.node, g.index, g.uuid, g.spec, g.base_speed, g.idle_temp_c
                    )
                )
                episodes.append(sim.events_touching(g.uuid))
        return cls(gpus, episodes)

    def groups(self) -> tuple[NodeGroup, ...]:
        """The fleet's nodes as groups of (model, node size), counted; a node's model is
        its first GPU's (the fleets built here have one model a node)."""
        nodes: dict[str, tuple[str, int]] = {}
        for gpu in self.gpus:
            model, size = nodes.get(gpu.node, (gpu.spec.key, 0))
            nodes[gpu.node] = (model, size + 1)
        counts = Counter(nodes.values())
        return tuple(NodeGroup(m, n, size) for (m, size), n in sorted(counts.items()))

    def class_factor(self, row: int, job_type: str) -> float:
        """GPU ``row``'s persistent factor for jobs of ``job_type``'s class (1.0 without
        class speeds)."""
        if self.class_speeds is None:
            return 1.0
        return float(self.class_speeds[row, CLASSES.index(job_class(job_type))])

    def events_at(
        self, row: int, t_s: float, jobs: Iterable[ScenarioEvent] = ()
    ) -> list[tuple[ScenarioEvent, float]]:
        """The events touching GPU ``row`` at ``t_s``, with the seconds since each began."""
        return [
            (e, t_s - e.start_s)
            for e in (*self.episodes[row], *jobs)
            if e.start_s <= t_s and (e.kind == "ecc" or t_s < episode_end_s(e))
        ]

    def read(
        self,
        row: int,
        t_s: float,
        jobs: Iterable[ScenarioEvent] = (),
        draws: Sequence[float] = _NO_NOISE,
    ) -> GpuReading:
        gpu = self.gpus[row]
        return read_gpu(
            uuid=gpu.uuid,
            index=gpu.index,
            spec=gpu.spec,
            base_speed=gpu.base_speed,
            idle_temp_c=gpu.idle_temp_c,
            events=self.events_at(row, t_s, jobs),
            draws=draws,
        )

    def true_speed(self, row: int, t_s: float) -> float:
        """How fast the GPU really is at ``t_s`` vs its model's median GPU (0 = unusable).
        Jobs only warm a GPU below its slowdown point, so they do not change its speed."""
        return self.read(row, t_s).true_speed

    def breakpoints(self, row: int) -> list[float]:
        """Times at which the GPU's episodes change its physics (start, end of heating,
        end, end of cooling): its samples are stationary between them."""
        points: set[float] = set()
        for e in self.episodes[row]:
            points.add(e.start_s)
            if e.kind == "thermal":
                points.add(e.start_s + e.ramp_s)
            end = episode_end_s(e)
            if math.isfinite(end):
                points.update((end, e.start_s + (e.duration_s or 0)))
        return sorted(points)
