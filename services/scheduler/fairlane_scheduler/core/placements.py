"""Core values of a placement (pure, frozen), how one is assembled from a choice, and
the lifecycle events they produce."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

import orjson

from fairlane_events.records import GpuSlot, NodeAssignment, PlacementEvent
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.placement import Choice, Packing

__all__ = [
    "EventKind",
    "Placement",
    "PlacementRequest",
    "assemble",
    "event_fields",
    "placement_event",
    "request_from_json",
    "request_to_json",
    "waiting",
    "with_master_port",
]

EventKind = Literal["created", "pending", "released", "expired", "failed"]


@dataclass(frozen=True)
class PlacementRequest:
    job_id: str
    namespace: str
    gpus_per_node: int
    min_gpu_memory_gib: float | None
    models: frozenset[str] | None
    fingerprint: str  # sha256 of the canonical request body (idempotency)
    lease_s: float | None = None  # None: the placement never expires
    nodes: int = 1  # more than one: a gang, all nodes or none
    policy: Packing = "fastest"
    queue: bool = False  # wait (pending) instead of failing when nothing fits now
    priority: int = 0  # pending requests are placed by priority, then age
    #: The kind of work (fairlane.gpu-speeds.v1's job class): placed by score x the GPUs'
    #: learned speeds under it, and told (``degraded``) when one of its GPUs turns slow.
    job_class: str | None = None
    #: A share of ONE GPU's compute (0 < share <= 1): the job shares the GPU; None: whole
    #: GPUs. Then ``gpus_per_node`` and ``nodes`` are 1 (the API refuses anything else).
    gpu_share: float | None = None
    #: With ``gpu_share``: the GPU memory the share may use; None: the share of the
    #: chosen GPU's memory.
    gpu_memory_mib: int | None = None
    #: A share on this node only (the Kubernetes extender's bind: kube-scheduler chose
    #: the node); None: any node.
    on_node: str | None = None

    @property
    def is_fractional(self) -> bool:
        return self.gpu_share is not None


def request_to_json(request: PlacementRequest) -> bytes:
    """What the database keeps of a request, to place it later if it waits."""
    data = {f.name: getattr(request, f.name) for f in fields(request)}  # asdict() copies deeply
    data["models"] = None if request.models is None else sorted(request.models)
    return orjson.dumps(data)


def request_from_json(raw: str | bytes) -> PlacementRequest:
    data: dict[str, Any] = orjson.loads(raw)
    models = data.get("models")
    return PlacementRequest(**{**data, "models": None if models is None else frozenset(models)})


@dataclass(frozen=True)
class Placement:
    id: str
    job_id: str
    namespace: str
    state: str  # pending | placed | released | expired | failed
    created_at_ms: int
    nodes: tuple[NodeAssignment, ...]
    fingerprint: str
    lease_expires_at_ms: int | None = None
    ended_at_ms: int | None = None
    fallback: bool = False  # placed below the threshold (best_available policy)
    gpu_scores: Mapping[str, float] = field(default_factory=dict)  # uuid -> score when placed
    gpu_models: Mapping[str, str] = field(default_factory=dict)  # uuid -> catalogue key
    #: A fractional placement's GPU's whole memory: the limit its tenants' memory is held
    #: to (the database's and the memory store's check); None for whole GPUs.
    shared_gpu_memory_mib: int | None = None

    @property
    def is_live(self) -> bool:
        return self.state == "placed"

    @property
    def is_open(self) -> bool:
        """Still wanting or holding GPUs: releasing it means something."""
        return self.state in ("pending", "placed")


def placement_event(
    placement: Placement, kind: EventKind, ts_ms: int, reason: str | None = None
) -> PlacementEvent:
    """The record the outbox relay publishes for one lifecycle change."""
    return PlacementEvent(**event_fields(placement, ts_ms), event=kind, reason=reason)


def event_fields(placement: Placement, ts_ms: int) -> dict[str, Any]:
    """What every event about ``placement`` says: who it is and its assignment."""
    return {
        "schema_": "placement/1",
        "placement_id": placement.id,
        "job_id": placement.job_id,
        "namespace": placement.namespace,
        "ts_ms": ts_ms,
        "nodes": list(placement.nodes),
    }


def with_master_port(placement: Placement, port: int) -> Placement:
    """``placement`` with another MASTER_PORT on every node (the store found its own
    choice taken and gave the lowest free one)."""
    if placement.nodes[0].master_port == port:
        return placement
    nodes = tuple(n.model_copy(update={"master_port": port}) for n in placement.nodes)
    return replace(placement, nodes=nodes)


def waiting(request: PlacementRequest, placement_id: str, now_ms: int) -> Placement:
    """The pending placement of a request that asked to queue and cannot be placed now."""
    return Placement(
        id=placement_id,
        job_id=request.job_id,
        namespace=request.namespace,
        state="pending",
        created_at_ms=now_ms,
        nodes=(),
        fingerprint=request.fingerprint,
    )


def assemble(
    request: PlacementRequest,
    fleet: FleetView,
    choice: Choice,
    *,
    port: int,
    placement_id: str,
    now_ms: int,
) -> Placement:
    """The placement of ``choice``: per node its GPUs by index, ``CUDA_VISIBLE_DEVICES``,
    ``NODE_RANK`` (choice order), ``WORLD_SIZE`` and the master node's address and port."""
    master = choice.nodes[0].node
    world_size = sum(len(n.rows) for n in choice.nodes)
    uuids = fleet.uuids
    assignments = []
    for rank, node in enumerate(choice.nodes):
        rows = list(node.rows)
        by_index = sorted(zip(fleet.index[rows].tolist(), rows, strict=True), key=_first)
        assignments.append(
            NodeAssignment.model_construct(
                node=node.node,
                node_rank=rank,
                gpus=[GpuSlot.model_construct(uuid=uuids[r], index=i) for i, r in by_index],
                cuda_visible_devices=",".join(str(i) for i, _ in by_index),
                master_addr=master,
                master_port=port,
                world_size=world_size,
            )
        )
    rows = [r for node in choice.nodes for r in node.rows]
    scores, models = fleet.score[rows].tolist(), fleet.model[rows].tolist()
    lease_ms = None if request.lease_s is None else now_ms + round(request.lease_s * 1000)
    return Placement(
        id=placement_id,
        job_id=request.job_id,
        namespace=request.namespace,
        state="placed",
        created_at_ms=now_ms,
        nodes=tuple(assignments),
        fingerprint=request.fingerprint,
        lease_expires_at_ms=lease_ms,
        fallback=choice.fallback,
        gpu_scores={uuids[r]: score for r, score in zip(rows, scores, strict=True)},
        gpu_models={uuids[r]: fleet.models[m] for r, m in zip(rows, models, strict=True)},
    )


def _first(pair: tuple[int, int]) -> int:
    return pair[0]
