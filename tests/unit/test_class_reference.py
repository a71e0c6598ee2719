"""Cross-job learning (fairlane_scoring.class_reference with learned_speed.observe_across):
what a class's reference teaches a one-GPU job, a job on one slow node and a half-slow
job; that a loose class barely teaches, a uniform fleet stays at 1.0, and the reference
stays bounded."""

from __future__ import annotations

import math
from statistics import NormalDist

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fairlane_scoring.class_reference import (
    ClassReference,
    JobCost,
    ReferenceConfig,
    reference_for,
    with_job_cost,
)
from fairlane_scoring.learned_speed import (
    LearnerConfig,
    ProgressReport,
    RankReport,
    SpeedState,
    estimate,
    observe_across,
    observe_all,
)

ACROSS = LearnerConfig(cross_job=ReferenceConfig())
MINUTE_MS = 60_000
TIGHT, LOOSE = 0.02, 1.0  # a label like "resnet50-bs64"; one like "compute-bound"


def _class_of(spread: float, jobs: int = 24) -> ClassReference:
    """Other jobs' normalised costs (log, around 0) spread like a normal of ``spread``:
    its quantiles, so the median is 0 and 1.4826 x MAD is ``spread``."""
    quantiles = [NormalDist(0.0, spread).inv_cdf((i + 0.5) / jobs) for i in range(jobs)]
    return ClassReference(
        tuple(JobCost(f"other-{i}", float(q), 0) for i, q in enumerate(quantiles))
    )


def _learned(spread: float, speeds: list[float], minutes: int = 30) -> list[float]:
    """Each GPU's learned speed after a job of the class's usual cost has run on GPUs of
    these true speeds for ``minutes``, reporting each minute."""
    states: dict[tuple[str, str], SpeedState] = {}
    references = {"c": _class_of(spread)}
    ranks = tuple(RankReport(f"gpu-{i}", 1.0 / s) for i, s in enumerate(speeds))
    reports = [(m * MINUTE_MS, ProgressReport("c", 60.0, ranks, job="j")) for m in range(minutes)]
    observe_all(states, reports, ACROSS, references=references)
    now = minutes * MINUTE_MS
    return [estimate(states.get((f"gpu-{i}", "c")), now, ACROSS).speed for i in range(len(speeds))]


def test_a_one_gpu_job_on_a_slow_gpu_is_learned_slow_when_its_class_is_tight() -> None:
    """The class speaks of a job about once, not every window: it weighs a little over
    a job-minute, which shrinks toward the prior a little (0.72)."""
    assert _learned(TIGHT, [0.7]) == pytest.approx([0.7], rel=0.05)


def test_a_loose_class_barely_moves_a_one_gpu_jobs_gpu() -> None:
    """The class says the job's cost to within e-fold: a GPU at 0.7 stays above 0.95."""
    assert _learned(LOOSE, [0.7])[0] > 0.95


def test_a_job_wholly_on_one_slow_node_is_learned_slow_across_jobs_not_within() -> None:
    assert _learned(TIGHT, [0.7] * 4) == pytest.approx([0.7] * 4, rel=0.03)
    within: dict[tuple[str, str], SpeedState] = {}
    ranks = tuple(RankReport(f"gpu-{i}", 1.0 / 0.7) for i in range(4))
    observe_all(within, [(MINUTE_MS, ProgressReport("c", 60.0, ranks, job="j"))], LearnerConfig())
    assert estimate(within[("gpu-0", "c")], MINUTE_MS, ACROSS).speed == pytest.approx(1.0)


def test_a_half_slow_job_is_resolved_when_its_class_is_tight() -> None:
    """Within the job alone, half its ranks at 0.6 make the other half look 1.67x fast."""
    slow_and_fast = _learned(TIGHT, [0.6, 0.6, 1.0, 1.0])
    assert slow_and_fast == pytest.approx([0.6, 0.6, 1.0, 1.0], rel=0.03)
    assert _learned(LOOSE, [0.6, 0.6, 1.0, 1.0])[2] > 1.2  # ambiguous, as before


def test_a_report_naming_no_job_or_a_class_too_young_learns_within_the_job_only() -> None:
    ranks = (RankReport("a", 0.2), RankReport("b", 0.2 / 0.8))
    anonymous = ProgressReport("c", 60.0, ranks)
    learned, reference = observe_across({}, _class_of(TIGHT), anonymous, MINUTE_MS, config=ACROSS)
    assert reference is None
    young = ClassReference((JobCost("other", 0.0, 0),))
    named = ProgressReport("c", 60.0, ranks, job="j")
    alone, grown = observe_across({}, young, named, MINUTE_MS, config=ACROSS)
    assert {k: s.stats.mean for k, s in alone.items()} == pytest.approx(
        {k: s.stats.mean for k, s in learned.items()}
    )
    assert grown is not None
    assert [c.job for c in grown.costs] == ["other", "j"]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([TIGHT, 0.3, LOOSE]))
def test_a_uniform_fleet_stays_at_one(seed: int, spread: float) -> None:
    """32 GPUs all at 1.0, one- to four-GPU jobs of a class with costs spread by
    ``spread``, noise 3 %: the typical GPU is learned within 3 %, none more than 15 % off
    (within the job alone none is more than 5 % off: a class of middling spread taken
    from a few jobs makes the worst GPU's estimate noisier, docs/evaluation.md)."""
    rng = np.random.default_rng(seed)
    states: dict[tuple[str, str], SpeedState] = {}
    references: dict[str, ClassReference] = {}
    for job in range(60):
        gpus = rng.choice(32, size=int(rng.integers(1, 5)), replace=False)
        cost = rng.normal(0.0, spread)
        reports = []
        for minute in range(5):
            noise = rng.normal(0.0, 0.03, gpus.size)
            ranks = tuple(
                RankReport(f"g{g}", math.exp(cost + z)) for g, z in zip(gpus, noise, strict=True)
            )
            at = (job * 5 + minute) * MINUTE_MS
            reports.append((at, ProgressReport("c", 60.0, ranks, job=str(job))))
        observe_all(states, reports, ACROSS, references=references)
    now = 300 * MINUTE_MS
    speeds = [estimate(s, now, ACROSS).speed for s in states.values()]
    errors = [abs(s - 1.0) for s in speeds]
    assert errors
    assert float(np.median(errors)) < 0.03
    assert max(errors) < 0.15


@given(
    st.lists(
        st.tuples(st.integers(0, 200), st.floats(-3, 3, allow_nan=False), st.integers(0, 10**9)),
        max_size=300,
    )
)
def test_the_reference_is_bounded_one_entry_a_job_and_counts_its_reports(
    costs: list[tuple[int, float, int]],
) -> None:
    config = ReferenceConfig(jobs=16, min_jobs=4)
    reference = ClassReference()
    seen: dict[str, int] = {}
    for job, log_cost, at in costs:
        reference = with_job_cost(reference, JobCost(str(job), log_cost, at), config)
        seen[str(job)] = seen.get(str(job), 0) + 1
        jobs = [c.job for c in reference.costs]
        assert len(jobs) <= config.jobs
        assert len(set(jobs)) == len(jobs)
        assert reference.costs[-1].job == str(job)
        assert reference.costs[-1].reports <= seen[str(job)]
    if costs:
        now = max(at for _, _, at in costs)
        found = reference_for(reference, "nobody", now, config)
        assert found is None or found[1] >= config.sigma_floor


def test_a_reference_leaves_the_asking_job_and_the_expired_out() -> None:
    config = ReferenceConfig(jobs=8, min_jobs=2, max_age_s=60.0)
    reference = ClassReference(
        (JobCost("old", 9.0, 0), JobCost("a", 1.0, 100_000), JobCost("b", 3.0, 100_000))
    )
    reference = with_job_cost(reference, JobCost("self", -50.0, 110_000), config)
    upper = 1.4826 * (1 + 2 * 1.17 / math.sqrt(2))  # MAD 1 over two jobs, its upper bound
    assert reference_for(reference, "self", 110_000, config) == pytest.approx((2.0, upper))
    assert reference_for(reference, "a", 110_000, config) is not None  # b and self
    with pytest.raises(ValueError, match="min_jobs"):
        ReferenceConfig(jobs=4, min_jobs=5)
