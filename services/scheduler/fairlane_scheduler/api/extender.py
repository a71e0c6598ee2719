"""kube-scheduler extender endpoints, in the exact JSON of k8s.io/kube-scheduler/extender/v1
(Go field names, no json tags: ``Pod``, ``NodeNames``, ``FailedNodes``, ``Host``...).

Answers come from memory only (fleet view, cached allocations): no Postgres or Kafka on
the request path, and the handlers run on the event loop, never beside the scores
follower in a thread. A pod that asks for no GPU passes every node it was given with
equal priorities (Fairlane has no opinion: kube-scheduler treats ``Error`` as a failed
filter, so answering one would make every CPU-only pod unschedulable). A GPU pod we
cannot read gets its reason in ``Error``, as the protocol expects, rather than an HTTP
error.
"""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter
from pydantic import BaseModel, ConfigDict

from fairlane_scheduler.api.deps import RuntimeDep
from fairlane_scheduler.api.errors import error_responses
from fairlane_scheduler.clock import now_ms
from fairlane_scheduler.core.extender import NodeVerdict, judge_nodes, priorities
from fairlane_scheduler.core.pod import PodError, pod_shape

__all__ = ["router"]

router = APIRouter(prefix="/v1/extender", tags=["kube-scheduler extender"])


class ExtenderArgs(BaseModel):
    model_config = ConfigDict(extra="allow")

    Pod: dict[str, Any]
    Nodes: dict[str, Any] | None = None  # a v1.NodeList, when not nodeCacheCapable
    NodeNames: list[str] | None = None  # when nodeCacheCapable


class ExtenderFilterResult(BaseModel):
    Nodes: dict[str, Any] | None = None
    NodeNames: list[str] | None = None
    FailedNodes: dict[str, str] = {}
    FailedAndUnresolvableNodes: dict[str, str] = {}
    Error: str = ""


class HostPriority(BaseModel):
    Host: str
    Score: int


def _names(args: ExtenderArgs) -> list[str]:
    if args.NodeNames is not None:
        return args.NodeNames
    items = (args.Nodes or {}).get("items") or []
    return [str((item.get("metadata") or {}).get("name", "")) for item in items]


def _judge(args: ExtenderArgs, runtime: RuntimeDep) -> dict[str, NodeVerdict] | None:
    """Each node's verdict, or ``None`` for a pod that asks for no GPU (no opinion)."""
    shape = pod_shape(args.Pod)
    if shape is None:
        return None
    return judge_nodes(
        runtime.fleet,
        shape=shape,
        policy=runtime.policy,
        allocated=runtime.live_gpus.current,
        now_ms=now_ms(),
        node_names=_names(args),
    )


@router.post(
    "/filter",
    response_model=ExtenderFilterResult,
    response_model_exclude_none=False,
    responses=error_responses(body=True),
)
async def extender_filter(args: ExtenderArgs, runtime: RuntimeDep) -> ExtenderFilterResult:
    try:
        verdicts = _judge(args, runtime)
    except PodError as exc:
        return ExtenderFilterResult(Error=str(exc))
    if verdicts is None:
        return ExtenderFilterResult(Nodes=args.Nodes, NodeNames=args.NodeNames)
    fits = [name for name, v in verdicts.items() if v.fits]
    result = ExtenderFilterResult(
        FailedNodes={n: v.reason for n, v in verdicts.items() if not v.fits and not v.unresolvable},
        FailedAndUnresolvableNodes={n: v.reason for n, v in verdicts.items() if v.unresolvable},
    )
    if args.NodeNames is not None:
        result.NodeNames = fits
    else:
        kept = set(fits)
        nodes = dict(args.Nodes or {})
        nodes["items"] = [
            i for i in nodes.get("items") or [] if (i.get("metadata") or {}).get("name") in kept
        ]
        result.Nodes = nodes
    return result


@router.post("/prioritize", response_model=list[HostPriority], responses=error_responses(body=True))
async def extender_prioritize(args: ExtenderArgs, runtime: RuntimeDep) -> list[HostPriority]:
    try:
        verdicts = _judge(args, runtime)
    except PodError:
        verdicts = {name: NodeVerdict(False) for name in _names(args)}
    if verdicts is None:
        return [HostPriority(Host=n, Score=0) for n in _names(args)]
    return [HostPriority(Host=n, Score=s) for n, s in priorities(verdicts).items()]
