"""Per-GPU per-class speeds in the simulator: the class map, the fleet, the job rate."""

from __future__ import annotations

import numpy as np
import pytest

from fairlane_eval.core.cluster import ClusterSpec, HiddenFleet, HiddenGpu
from fairlane_eval.core.engine import simulate
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.fleet_variability import Variability
from fairlane_eval.core.job_classes import JOB_CLASSES, job_class
from fairlane_eval.core.policies import policy
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.workload import Job
from fairlane_events.gpu_models import CATALOG
from fairlane_sim.class_speeds import CLASSES


class OneStepPerSecond:
    def steps_per_s(self, job_type: str, model: str, gpus: int) -> float:
        return 1.0


@pytest.mark.parametrize(
    ("job_type", "expected"),
    [
        ("ResNet-50 (batch size 64)", "resnet50"),
        ("ResNet-18 (batch size 16)", "resnet50"),
        ("CycleGAN", "resnet50"),
        ("Transformer (batch size 128)", "bert"),
        ("LM (batch size 20)", "bert"),
        ("Recommendation (batch size 512)", "pagerank"),
        ("A3C", "resnet50"),
        ("LMX", "resnet50"),  # a prefix matches whole words only
        ("any", "resnet50"),
    ],
)
def test_job_types_map_to_their_measured_class(job_type: str, expected: str) -> None:
    assert job_class(job_type) == expected


def test_every_mapped_class_is_a_measured_one() -> None:
    assert set(JOB_CLASSES.values()) <= set(CLASSES)


def _fleet(factors: list[list[float]]) -> HiddenFleet:
    gpus = [
        HiddenGpu(i, "node-0000", i, f"GPU-{i}", CATALOG["V100"], 1.0, 38.0)
        for i in range(len(factors))
    ]
    return HiddenFleet(gpus, [[] for _ in gpus], np.array(factors))


def _end(fleet: HiddenFleet, job_type: str) -> float | None:
    jobs = [Job("j", 0.0, 1, 1, job_type, 100.0)]
    result = simulate(jobs, fleet, policy("static"), OneStepPerSecond(), SimConfig(), seed=1)
    return result.outcomes[0].end_s


def test_a_job_on_a_gpu_half_as_fast_for_its_class_runs_twice_as_long() -> None:
    fleet = _fleet([[0.5, 1.0, 1.0, 1.0]])  # slow for resnet50 only
    assert _end(fleet, "ResNet-50 (batch size 64)") == pytest.approx(200.0)
    assert _end(fleet, "LM (batch size 20)") == pytest.approx(100.0)


def test_without_class_speeds_the_factor_is_one() -> None:
    fleet = HiddenFleet([HiddenGpu(0, "n", 0, "GPU-0", CATALOG["V100"], 1.0, 38.0)], [[]])
    assert fleet.class_factor(0, "LM") == 1.0


def test_class_speeds_leave_the_rest_of_the_fleet_as_drawn_without_them() -> None:
    spec = ClusterSpec.parse("V100:3x4,K80:2x8", 8)
    spread: Variability = {None: (0.9, 1.0, 1.1)}
    plain = HiddenFleet.build(spec, spread, FaultModel(rate_scale=1.0), 86_400.0, 7)
    classed = HiddenFleet.build(
        spec, spread, FaultModel(rate_scale=1.0), 86_400.0, 7, class_speeds=True
    )
    assert plain.gpus == classed.gpus
    assert plain.episodes == classed.episodes
    assert plain.class_speeds is None
    assert classed.class_speeds is not None
    assert classed.class_speeds.shape == (len(classed.gpus), len(CLASSES))
    assert np.all(classed.class_speeds > 0)


def test_class_speeds_are_deterministic() -> None:
    spec = ClusterSpec.parse("V100:4x4", 4)
    even: Variability = {None: (1.0,)}
    a = HiddenFleet.build(spec, even, FaultModel(), 3600.0, 3, class_speeds=True).class_speeds
    b = HiddenFleet.build(spec, even, FaultModel(), 3600.0, 3, class_speeds=True).class_speeds
    assert a is not None
    assert b is not None
    np.testing.assert_array_equal(a, b)
