"""Learning per-class speeds in the simulator: reports, the learner, per-class views."""

from __future__ import annotations

import numpy as np
import pytest

from fairlane_eval.core.cluster import HiddenFleet, HiddenGpu
from fairlane_eval.core.engine import simulate
from fairlane_eval.core.metrics import summarise
from fairlane_eval.core.policies import POLICIES, policy
from fairlane_eval.core.policy_view import PolicyView
from fairlane_eval.core.sim_types import SimConfig
from fairlane_eval.core.workload import Job
from fairlane_events.gpu_models import CATALOG
from fairlane_scheduler.core.placement import Choice, JobShape
from fairlane_scoring.learned_speed import ProgressReport, RankReport

RESNET = "ResNet-50 (batch size 64)"
LM = "LM (batch size 20)"


class OneStepPerSecond:
    def steps_per_s(self, job_type: str, model: str, gpus: int) -> float:
        return 1.0


def node_of_four(resnet_factors: list[float]) -> HiddenFleet:
    """One node of 4 V100s, no episodes; these resnet50 factors, 1.0 for other classes."""
    gpus = [HiddenGpu(i, "node-0000", i, f"GPU-{i}", CATALOG["V100"], 1.0, 38.0) for i in range(4)]
    factors = np.ones((4, 4))
    factors[:, 0] = resnet_factors
    return HiddenFleet(gpus, [[] for _ in gpus], factors)


def test_learning_policies_are_not_in_the_standing_comparison() -> None:
    assert {"fairlane-learned", "oracle-learned"}.isdisjoint(p.name for p in POLICIES)
    assert policy("fairlane-learned").learns
    assert not policy("oracle-learned").learns


def test_reports_teach_the_view_a_slow_gpu_for_its_class_only() -> None:
    fleet = node_of_four([0.8, 1.0, 1.0, 1.0])
    view = PolicyView(fleet, policy("fairlane-learned"), SimConfig(), seed=1)
    view.start(np.ones(4), {})
    ranks = (RankReport("GPU-0", 1 / 0.8), RankReport("GPU-1", 1.0), RankReport("GPU-2", 1.0))
    for minute in range(1, 11):
        view.report(ProgressReport("resnet50", 60.0, ranks), 1_700_000_000_000 + minute * 60_000)
    shape = JobShape(1)
    resnet = view.choose(shape, set(), 1_700_000_700_000, RESNET)
    lm = view.choose(shape, set(), 1_700_000_700_000, LM)
    assert view.learned_speed(0, "resnet50") == pytest.approx(0.8, abs=0.05)
    assert view.learned_speed(0, "bert") == 1.0
    assert isinstance(resnet, Choice)
    assert isinstance(lm, Choice)
    assert resnet.nodes[0].rows != (0,)  # avoids the GPU slow for its class
    assert lm.nodes[0].rows == (0,)  # first fit: GPU 0 is as good as any for LM


def back_to_back(job_type: str, n: int) -> list[Job]:
    """``n`` 2-GPU jobs of 600 steps, each arriving after the last one could finish."""
    return [Job(f"j{k}", k * 1300.0, 2, 1, job_type, 600.0) for k in range(n)]


def mean_jct(name: str, fleet: HiddenFleet, jobs: list[Job]) -> float:
    result = simulate(jobs, fleet, policy(name), OneStepPerSecond(), SimConfig(), seed=1)
    return summarise(result).mean_jct_s


def test_fairlane_learned_stops_placing_on_a_gpu_slow_for_the_class() -> None:
    # GPU 0 runs ResNet at half speed; static's first fit puts every job on GPUs 0 and 1,
    # 1200 s each (NVML sees nothing: fairlane-fastest lands there by its score's tie
    # noise). The learner finds GPU 0 within the first job; the later jobs run on
    # healthy GPUs, 600 s each.
    fleet = node_of_four([0.5, 1.0, 1.0, 1.0])
    jobs = back_to_back(RESNET, 5)
    assert mean_jct("static", fleet, jobs) == pytest.approx(1200.0)
    assert mean_jct("fairlane-learned", fleet, jobs) == pytest.approx((1200 + 4 * 600) / 5)
    assert mean_jct("oracle-learned", fleet, jobs) == pytest.approx(600.0)


def test_fairlane_learned_keeps_a_gpu_slow_only_for_another_class() -> None:
    fleet = node_of_four([0.5, 1.0, 1.0, 1.0])
    assert mean_jct("fairlane-learned", fleet, back_to_back(LM, 4)) == pytest.approx(600.0)


def test_on_a_uniform_fleet_fairlane_learned_is_fairlane_fastest() -> None:
    fleet = node_of_four([1.0, 1.0, 1.0, 1.0])
    jobs = back_to_back(RESNET, 4)
    assert mean_jct("fairlane-learned", fleet, jobs) == mean_jct("fairlane-fastest", fleet, jobs)


def test_learning_runs_are_deterministic() -> None:
    fleet = node_of_four([0.7, 0.9, 1.0, 1.0])
    jobs = back_to_back(RESNET, 4)
    results = [
        simulate(jobs, fleet, policy("fairlane-learned"), OneStepPerSecond(), seed=3)
        for _ in range(2)
    ]
    assert results[0] == results[1]


def test_across_jobs_one_gpu_jobs_teach_a_slow_gpu_that_within_jobs_cannot() -> None:
    """Rounds of three one-GPU jobs on four GPUs, GPU 0 at half speed for ResNet: the
    scores' tie noise puts a job of about every other round there. Within jobs nothing
    is learned; across jobs
    (every job's cost known: a tight class) GPU 0 is found once the class has 16 jobs,
    and the later rounds leave it idle."""
    fleet = node_of_four([0.5, 1.0, 1.0, 1.0])
    jobs = [Job(f"j{r}-{k}", r * 1300.0, 1, 1, RESNET, 600.0) for r in range(20) for k in range(3)]
    config = SimConfig(job_cost_sigma=0.0)

    def slow_starts(name: str) -> int:
        result = simulate(jobs, fleet, policy(name), OneStepPerSecond(), config, seed=1)
        return sum(1 for outcome in result.outcomes if outcome.rows == (0,))

    assert slow_starts("fairlane-learned") >= 8  # 9 of 20 at seed 1
    assert slow_starts("fairlane-learned-across") <= 4  # all before the class had 16 jobs
