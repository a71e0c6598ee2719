"""What a policy asks the scheduler for a job: allowed models, packing, the job's speeds."""

from __future__ import annotations

import numpy as np
import pytest

from fairlane_eval.core.cluster import ClusterSpec, HiddenFleet
from fairlane_eval.core.faults import FaultModel
from fairlane_eval.core.policies import policy
from fairlane_eval.core.policy_view import PolicyView, relative_speeds
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.throughputs import ThroughputTable
from fairlane_eval.core.workload import Job

TABLE = ThroughputTable(
    {
        ("LM", "V100", 4): 600.0,
        ("LM", "P100", 4): 300.0,
        ("LM", "K80", 4): 0.0,  # out of memory
        ("A3C", "V100", 4): 7.0,
        ("A3C", "P100", 4): 7.0,
        ("A3C", "K80", 4): 3.5,
    }
)


@pytest.mark.parametrize(
    ("speeds", "relative"),
    [
        ({"V100": 600.0, "P100": 300.0, "K80": 0.0}, {"V100": 1.0, "P100": 0.5, "K80": 0.0}),
        ({"V100": 7.0, "P100": 7.0}, {"V100": 1.0, "P100": 1.0}),
        ({"V100": 0.0}, {"V100": 0.0}),
        ({}, {}),
    ],
)
def test_relative_speeds_put_the_jobs_fastest_model_at_one(
    speeds: dict[str, float], relative: dict[str, float]
) -> None:
    assert relative_speeds(speeds) == relative


def started_view(name: str) -> PolicyView:
    """The policy's view of a healthy 4-GPU node each of V100, P100 and K80."""
    spec = ClusterSpec((("V100", 1), ("P100", 1), ("K80", 1)), 4)
    fleet = HiddenFleet.build(spec, {None: (1.0,)}, FaultModel(rate_scale=0.0), 3600.0, 0)
    seen = PolicyView(fleet, policy(name), SimConfig(), 0)
    seen.start(np.ones(len(fleet.gpus)), {})
    return seen


@pytest.mark.parametrize("name", ["oracle-fastest", "oracle-spread"])
def test_a_job_ranks_models_by_its_speeds_relative_to_its_fastest(name: str) -> None:
    # In steps/s the LM's speeds are 600 and 300: the scheduler's 0.1 capacity step would
    # be exact ranking for them. Relative, the step means 10 % of the job's best speed.
    seen = started_view(name)
    lm = seen.shape(Job("lm", 0.0, 4, 1, "LM", 1000.0), TABLE)
    assert lm.model_speeds == {"V100": 1.0, "P100": 0.5, "K80": 0.0}
    assert lm.models == frozenset({"V100", "P100"})
    a3c = seen.shape(Job("a3c", 0.0, 4, 1, "A3C", 1000.0), TABLE)
    assert a3c.model_speeds == {"V100": 1.0, "P100": 1.0, "K80": 0.5}
    assert a3c.models is None


def test_a_policy_without_job_speeds_sends_none() -> None:
    shape = started_view("static").shape(Job("lm", 0.0, 4, 1, "LM", 1000.0), TABLE)
    assert shape.model_speeds is None
    assert shape.models == frozenset({"V100", "P100"})
