"""Where a job could run at all (unplaceable jobs), and its ideal allocation's speed."""

from __future__ import annotations

import pytest

from fairlane_eval.core.cluster_spec import NodeGroup
from fairlane_eval.core.feasibility import ideal_rate, unplaceable_jobs, why_unplaceable
from fairlane_eval.core.workload import Job


class ByModel:
    """Steps/s per model for any job type and size; 0 (cannot run) where not listed."""

    def __init__(self, **rates: float) -> None:
        self.rates = {model.replace("_", "-"): rate for model, rate in rates.items()}

    def steps_per_s(self, job_type: str, model: str, gpus: int) -> float:
        return self.rates.get(model, 0.0)


def gang(per_node: int, nodes: int = 1, name: str = "j") -> Job:
    return Job(name, 0.0, per_node, nodes, "any", 100.0)


T4x4 = NodeGroup("T4", 16, 4)
A100x8 = NodeGroup("A100-40GB", 2, 8)


@pytest.mark.parametrize(
    ("job", "groups", "rates", "reason"),
    [
        (gang(4, 16), [T4x4, A100x8], ByModel(T4=1, A100_40GB=3), None),
        (gang(8, 2), [T4x4, A100x8], ByModel(T4=1, A100_40GB=3), None),
        (gang(4, 18), [T4x4, A100x8], ByModel(T4=1, A100_40GB=3), None),  # the A100s help
        (
            gang(8, 3),
            [T4x4, A100x8],
            ByModel(T4=1, A100_40GB=3),
            "needs 3 nodes of at least 8 GPUs it can run on; the cluster has 2",
        ),
        (
            gang(16),
            [T4x4, A100x8],
            ByModel(T4=1, A100_40GB=3),
            "needs 16 GPUs on one node; the largest node it can run on has 8",
        ),
        (
            gang(8),
            [T4x4, A100x8],
            ByModel(T4=1),  # 0 on the A100s: out of memory there, say
            "needs 8 GPUs on one node; the largest node it can run on has 4",
        ),
        (
            gang(4, 17),
            [T4x4, A100x8],
            ByModel(T4=1),
            "needs 17 nodes of at least 4 GPUs it can run on; the cluster has 16",
        ),
        (
            gang(1),
            [T4x4, A100x8],
            ByModel(V100=1),
            "job type 'any' cannot run on T4, A100-40GB (throughput 0)",
        ),
    ],
)
def test_why_a_job_can_never_be_placed(
    job: Job, groups: list[NodeGroup], rates: ByModel, reason: str | None
) -> None:
    assert why_unplaceable(job, groups, rates) == reason


def test_unplaceable_jobs_are_every_one_that_cannot_fit_in_order() -> None:
    jobs = [gang(4, name="a"), gang(16, name="b"), gang(8, 2, name="c"), gang(32, name="d")]
    found = unplaceable_jobs(jobs, [T4x4, A100x8], ByModel(T4=1, A100_40GB=3))
    assert [u.job.job_id for u in found] == ["b", "d"]
    assert found[1].reason == "needs 32 GPUs on one node; the largest node it can run on has 8"


@pytest.mark.parametrize(
    ("job", "rates", "expected"),
    [
        (gang(8), ByModel(T4=1, A100_40GB=3), 3.0),  # one A100 node: the fastest
        (gang(8, 2), ByModel(T4=1, A100_40GB=3), 3.0),  # both A100 nodes
        (gang(4, 3), ByModel(T4=1, A100_40GB=3), 1.0),  # 2 A100 nodes + 1 T4: the T4's pace
        (gang(4), ByModel(T4=5, A100_40GB=3), 5.0),  # the job's own speeds, not the catalogue's
        (gang(8), ByModel(T4=5, A100_40GB=3), 3.0),  # the T4 nodes are too small
        (gang(8, 3), ByModel(T4=1, A100_40GB=3), 0.0),  # cannot be placed
        (gang(1), ByModel(V100=1), 0.0),
    ],
)
def test_ideal_rate_is_the_fastest_pace_any_placement_gives(
    job: Job, rates: ByModel, expected: float
) -> None:
    assert ideal_rate(job, [T4x4, A100x8], rates) == expected
