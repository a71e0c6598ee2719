"""One placement decision on the in-memory view (pure): the request's quota on what the
ledger holds, the choice of GPUs on the fleet view (read from the ranked per-node summaries), a
free MASTER_PORT on the master node, and the placement assembled from them. The caller
reserves it in the ledger in the same step (no await between), so concurrent requests
never choose the same GPUs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.ledger import Ledger
from fairlane_scheduler.core.master_port import PortRange, next_free_port
from fairlane_scheduler.core.node_ranking import NodeRankings
from fairlane_scheduler.core.placement import JobShape, NoPlacement, PlacementPolicy, choose
from fairlane_scheduler.core.placements import Placement, PlacementRequest, assemble
from fairlane_scheduler.core.quota import Quota, QuotaVerdict, models_within_quota
from fairlane_scheduler.core.share_decision import ShareTarget, decide_share
from fairlane_scheduler.core.sharing import DEFAULT_MIX, SharingRule, WorkloadMix
from fairlane_scheduler.errors import NoCapacityError, QuotaExceededError

__all__ = ["SUMMARIES_FROM_NODES", "decide"]

#: Below this many nodes the full scan is used instead of the ranked summaries (same
#: decision). Since the few nodes that change between two decisions are refreshed and
#: re-ranked in plain Python, the ranked decision is the cheaper one from the smallest
#: fleet the benchmark measures, 24 nodes: 60-80 vs 104-116 us, 84-120 vs 137-152 us at
#: 125 nodes (bench/scheduler_decision.py, ``--release-batch 8``; docs/benchmarks-history.md).
#: The default of the scheduler's ``summaries_from_nodes`` setting.
SUMMARIES_FROM_NODES = 24


def decide(
    request: PlacementRequest,
    *,
    fleet: FleetView,
    rankings: NodeRankings,
    ledger: Ledger,
    quota: Quota | None,
    policy: PlacementPolicy,
    ports: PortRange,
    placement_id: str,
    now_ms: int,
    summaries_from_nodes: int = SUMMARIES_FROM_NODES,
    mix: WorkloadMix = DEFAULT_MIX,
    rule: SharingRule = "fgd",
) -> Placement:
    """The placement of ``request``, or :class:`QuotaExceededError` (the namespace may not
    take what it asks) or :class:`NoCapacityError` (nothing fits now). The choice reads
    ``summaries`` on a fleet of at least ``summaries_from_nodes`` nodes, else scans it.
    A fractional request goes to :func:`decide_share`, packed by ``rule`` for ``mix``."""
    if request.is_fractional:
        on = ShareTarget(fleet, ledger, quota, policy, ports)
        return decide_share(
            request, on, placement_id=placement_id, now_ms=now_ms, mix=mix, rule=rule
        )
    shape = JobShape(
        gpus_per_node=request.gpus_per_node,
        nodes=request.nodes,
        min_gpu_memory_gib=request.min_gpu_memory_gib,
        models=request.models,
        policy=request.policy,
        job_class=request.job_class,
    )
    if quota is not None:
        shape = replace(shape, models=_allowed_models(request, shape, quota, ledger, fleet))
    if len(fleet.nodes) >= summaries_from_nodes:
        choice = rankings.choose(fleet, shape, policy, now_ms)
    else:
        choice = choose(fleet, shape, policy, fleet.held_rows(), now_ms)
    if isinstance(choice, NoPlacement):
        raise NoCapacityError(choice.summary(), choice.reasons)
    master = choice.nodes[0].node
    port = next_free_port(ledger.ports(master), ports)
    if port is None:
        raise NoCapacityError(f"no free MASTER_PORT on {master}", {"ports": 1})
    return assemble(request, fleet, choice, port=port, placement_id=placement_id, now_ms=now_ms)


def _allowed_models(
    request: PlacementRequest, shape: JobShape, quota: Quota, ledger: Ledger, fleet: FleetView
) -> frozenset[str] | None:
    used: Mapping[str, float] = ledger.usage(request.namespace)
    wanted = request.gpus_per_node * request.nodes
    models = models_within_quota(quota, used, shape.models, fleet.models, wanted)
    if isinstance(models, QuotaVerdict):
        raise QuotaExceededError.of(models.reason, ever=models.ever)
    return models
