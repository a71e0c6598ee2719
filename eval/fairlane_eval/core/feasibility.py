"""Where a job could run at all, and how fast it would run there at best (pure).

A job is a gang of ``nodes`` x ``gpus_per_node`` GPUs; it can use a node when the node
has at least ``gpus_per_node`` GPUs of a model its throughput table gives a rate above 0
(the request allows no other model, whatever the policy). A job for which the whole
cluster, empty and healthy, holds too few such nodes can never be placed: the simulator
would leave it waiting for ever, so the caller must know (:func:`unplaceable_jobs`).

:func:`ideal_rate` is the job's speed on its ideal allocation, the same for every policy:
median GPUs (speed 1.0, no episode) of the fastest models whose nodes can host it.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from fairlane_eval.core.cluster_spec import NodeGroup
from fairlane_eval.core.sim_types import Throughputs
from fairlane_eval.core.workload import Job

__all__ = ["Unplaceable", "ideal_rate", "unplaceable_jobs", "why_unplaceable"]


@dataclass(frozen=True)
class Unplaceable:
    """A job that no node of the cluster, empty and healthy, can take, and why."""

    job: Job
    reason: str


def _rates(job: Job, groups: Sequence[NodeGroup], throughputs: Throughputs) -> list[float]:
    return [throughputs.steps_per_s(job.job_type, g.model, job.gpus) for g in groups]


def ideal_rate(job: Job, groups: Sequence[NodeGroup], throughputs: Throughputs) -> float:
    """Steps/s of ``job`` on its ideal allocation; 0 when the cluster cannot host it.

    Taking node groups from the fastest model down, the first rate ``r`` at which the
    groups at least as fast that have nodes of at least ``gpus_per_node`` GPUs hold
    ``nodes`` nodes: a gang runs at its slowest GPU, so that is the highest rate any
    placement on this cluster can give it (at speed 1.0: no variability, no episode).
    """
    fitting = [
        (rate, g)
        for rate, g in zip(_rates(job, groups, throughputs), groups, strict=True)
        if rate > 0 and g.gpus_per_node >= job.gpus_per_node
    ]
    nodes = 0
    for rate, group in sorted(fitting, key=lambda p: -p[0]):
        nodes += group.nodes
        if nodes >= job.nodes:
            return rate
    return 0.0


def why_unplaceable(job: Job, groups: Sequence[NodeGroup], throughputs: Throughputs) -> str | None:
    """Why no placement on an empty, healthy cluster of ``groups`` can take ``job``; None
    when one can."""
    rates = _rates(job, groups, throughputs)
    runnable = [g for g, rate in zip(groups, rates, strict=True) if rate > 0]
    if not runnable:
        models = ", ".join(dict.fromkeys(g.model for g in groups))
        return f"job type {job.job_type!r} cannot run on {models} (throughput 0)"
    fitting = [g for g in runnable if g.gpus_per_node >= job.gpus_per_node]
    if not fitting:
        largest = max(g.gpus_per_node for g in runnable)
        return (
            f"needs {job.gpus_per_node} GPUs on one node; the largest node it can run on "
            f"has {largest}"
        )
    nodes = sum(g.nodes for g in fitting)
    if nodes < job.nodes:
        return (
            f"needs {job.nodes} nodes of at least {job.gpus_per_node} GPUs it can run on; "
            f"the cluster has {nodes}"
        )
    return None


def unplaceable_jobs(
    jobs: Iterable[Job], groups: Sequence[NodeGroup], throughputs: Throughputs
) -> tuple[Unplaceable, ...]:
    """The jobs no placement can ever take on this cluster, in the order given."""
    reasons: dict[tuple[str, int, int], str | None] = {}
    found = []
    for job in jobs:
        key = (job.job_type, job.gpus_per_node, job.nodes)
        if key not in reasons:
            reasons[key] = why_unplaceable(job, groups, throughputs)
        reason = reasons[key]
        if reason is not None:
            found.append(Unplaceable(job, reason))
    return tuple(found)
