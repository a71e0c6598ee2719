"""kube-scheduler extender endpoints, in the exact JSON of k8s.io/kube-scheduler/extender/v1
(Go field names, no json tags: ``Pod``, ``NodeNames``, ``FailedNodes``, ``Host``...).

Answers come from memory only (fleet view, cached allocations, the pod ledger): no
Postgres or Kafka on the request path, and the handlers run on the event loop, never
beside the scores follower in a thread. Bodies are read and written with orjson, not
pydantic: a call carries thousands of node names (the models below only document the
shapes in OpenAPI). A pod that asks for no GPU passes every node it was given with equal
priorities (Fairlane has no opinion: kube-scheduler treats ``Error`` as a failed filter,
so answering one would make every CPU-only pod unschedulable). A GPU pod we cannot read
gets its reason in ``Error``, as the protocol expects, rather than an HTTP error.

``/bind`` binds the pod through the Kubernetes API (kube-scheduler's ``bindVerb``) and
counts its GPUs on the node at once, before the next pod's filter can offer them again.

A pod asking for a share of one GPU (``fairlane.dev/gpu-share``) is judged by the share
rule (core/extender_shares.py) on the room the placements' ledger and the pods in flight
leave; its bind records the share as a placement in Postgres on the chosen node (the
database's per-GPU sums arbitrate), then binds the pod with the share's annotations
(kube/share_placements.py).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import orjson
from fastapi import APIRouter, HTTPException, Request, Response
from fastapi.exceptions import RequestValidationError
from pydantic import BaseModel, ConfigDict, Field

from fairlane_scheduler.api.deps import Runtime
from fairlane_scheduler.api.errors import error_responses
from fairlane_scheduler.clock import now_ms
from fairlane_scheduler.core.extender import GangAsk, Verdicts, judge_nodes
from fairlane_scheduler.core.extender_shares import judge_share_nodes, placed_shares
from fairlane_scheduler.core.fleet import FleetView
from fairlane_scheduler.core.node_summary import NodeSummaries
from fairlane_scheduler.core.pod import (
    PodError,
    PodRef,
    PodShare,
    pod_gang,
    pod_shape,
    pod_share,
)
from fairlane_scheduler.core.pod_ledger import PodGpus, PodLedger
from fairlane_scheduler.core.pod_shares import ShareFlights, add_uses
from fairlane_scheduler.core.sharing import SharingRule
from fairlane_scheduler.errors import SchedulerError
from fairlane_scheduler.kube.share_placements import pod_share_request, share_annotations

__all__ = ["Binder", "ExtenderState", "router"]

router = APIRouter(prefix="/v1/extender", tags=["kube-scheduler extender"])

_REUSE_MS = 1000  # how long a filter's answer may rank the same pod

#: (pod, node, annotations for the pod) -> None once the Binding is created.
Binder = Callable[[PodRef, str, Mapping[str, str]], Awaitable[None]]


@dataclass
class ExtenderState:
    """What the extender remembers between calls (on ``app.state.extender``)."""

    ledger: PodLedger = field(default_factory=PodLedger)
    flights: ShareFlights = field(default_factory=ShareFlights)  # fractional pods passed
    summaries: NodeSummaries = field(default_factory=NodeSummaries)
    sharing_rule: SharingRule = "fgd"  # the placement service's (FAIRLANE_SHARING_RULE)
    binder: Binder | None = None  # set when the Kubernetes API is configured
    #: The last filter's answer (pod uid, when, verdicts): kube-scheduler's prioritize
    #: for the same pod follows within milliseconds, and is ranked from it.
    last: tuple[str, int, Verdicts] | None = None


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


class ExtenderBindingArgs(BaseModel):
    PodName: str = Field(min_length=1)
    PodNamespace: str = Field(min_length=1)
    PodUID: str = Field(min_length=1)
    Node: str = Field(min_length=1)


class ExtenderBindingResult(BaseModel):
    Error: str = ""


def _invalid(field_name: str, message: str) -> RequestValidationError:
    return RequestValidationError(
        [{"loc": ("body", field_name), "msg": message, "type": "invalid", "input": None}]
    )


async def _body(request: Request) -> dict[str, Any]:
    try:
        body = orjson.loads(await request.body())
    except orjson.JSONDecodeError as exc:
        raise HTTPException(400, f"the body is not JSON: {exc}") from exc
    if not isinstance(body, dict):
        raise _invalid("", "must be an object")
    return body


async def _args(request: Request) -> tuple[dict[str, Any], list[str], dict[str, Any] | None]:
    """The pod, the candidate names, and the NodeList when names were not sent."""
    body = await _body(request)
    pod, names, nodes = body.get("Pod"), body.get("NodeNames"), body.get("Nodes")
    if not isinstance(pod, dict):
        raise _invalid("Pod", "must be an object (a v1.Pod)")
    if nodes is not None and not isinstance(nodes, dict):
        raise _invalid("Nodes", "must be an object (a v1.NodeList)")
    if names is not None:
        if not isinstance(names, list) or not set(map(type, names)) <= {str}:  # one C loop
            raise _invalid("NodeNames", "must be a list of node names")
        return pod, names, None
    items = (nodes or {}).get("items") or []
    return pod, [str((i.get("metadata") or {}).get("name", "")) for i in items], nodes


def _json(content: Any) -> Response:
    return Response(orjson.dumps(content), media_type="application/json")


def _uid(pod: dict[str, Any]) -> str:
    metadata = pod.get("metadata") or {}
    return str(metadata.get("uid") or f"{metadata.get('namespace')}/{metadata.get('name')}")


@dataclass(frozen=True)
class _Judged:
    """Each node's verdict and what the pod asks; for a share, the GPU (uuid, MiB) the
    rule chose on each node that passed."""

    verdicts: Verdicts
    ask: PodGpus | PodShare
    gpus: Mapping[str, tuple[str, int]] = field(default_factory=dict)


def _judge(
    request: Request, pod: dict[str, Any], names: list[str], *, explain: bool = True
) -> _Judged | None:
    """Each node's verdict, or ``None`` for a pod that asks for no GPU (no opinion)."""
    share, shape = pod_share(pod), pod_shape(pod)
    if share is None and shape is None:
        return None
    runtime: Runtime = request.app.state.runtime
    state: ExtenderState = request.app.state.extender
    fleet, ledger, now = runtime.fleet, state.ledger, now_ms()
    uid, width = _uid(pod), len(fleet.nodes)
    held = ledger.held(fleet.node_id, width, now, exclude=uid)
    flying = state.flights.use(now, exclude=uid)
    if share is not None:
        judged = judge_share_nodes(
            fleet,
            state.summaries,
            pod=share,
            policy=runtime.policy,
            use=add_uses(placed_shares(runtime.service.ledger), flying),
            whole_pods=held,
            now_ms=now,
            node_names=names,
            mix=runtime.service.demand.mix(),
            rule=state.sharing_rule,
        )
        return _Judged(judged.verdicts, share, judged.gpus)
    assert shape is not None
    if flying:  # GPUs about to be shared are no whole pod's
        shared = runtime.service.ledger.shared_gpus
        node_of = partial(_node_of, runtime.fleet)
        held = held + state.flights.unshared_per_node(flying, shared, node_of, width)
    gang = pod_gang(pod)
    ask = None
    if gang is not None:
        ask = GangAsk(gang[0], max(gang[1] - ledger.gang_members(gang[0], uid), 1))
    verdicts = judge_nodes(
        fleet,
        state.summaries,
        shape=shape,
        policy=runtime.policy,
        held=held,
        now_ms=now,
        node_names=names,
        gang=ask,
        explain=explain,
    )
    return _Judged(verdicts, PodGpus(shape.gpus_per_node, None if gang is None else gang[0]))


def _node_of(fleet: FleetView, gpu: str) -> int | None:
    """The fleet node id of a GPU (None: not in the fleet)."""
    row = fleet.row.get(gpu)
    return None if row is None else int(fleet.node[row])


_INVALID: dict[int | str, dict[str, Any]] = {
    422: {
        "description": "a field of the body has the wrong type (named in detail[].loc)",
        "content": {
            "application/json": {"schema": {"$ref": "#/components/schemas/HTTPValidationError"}}
        },
    }
}


def _documented(model: type[BaseModel]) -> dict[str, Any]:
    """The OpenAPI request body of a route that reads its body itself."""
    schema = {"application/json": {"schema": model.model_json_schema()}}
    return {"requestBody": {"content": schema, "required": True}}


@router.post(
    "/filter",
    response_model=ExtenderFilterResult,
    responses={**error_responses(body=True), **_INVALID},
    openapi_extra=_documented(ExtenderArgs),
)
async def extender_filter(request: Request) -> Response:
    pod, names, nodes = await _args(request)
    try:
        judged = _judge(request, pod, names)
    except PodError as exc:
        return _json({"Error": str(exc), "FailedNodes": {}, "FailedAndUnresolvableNodes": {}})
    result: dict[str, Any] = {"Nodes": None, "NodeNames": None, "Error": ""}
    if judged is None:
        result |= {"FailedNodes": {}, "FailedAndUnresolvableNodes": {}}
        return _json(result | ({"Nodes": nodes} if nodes is not None else {"NodeNames": names}))
    verdicts = judged.verdicts
    passed = verdicts.passed()
    state: ExtenderState = request.app.state.extender
    state.last = (_uid(pod), now_ms(), verdicts)
    if passed:
        if isinstance(judged.ask, PodShare):
            chosen = dict(judged.gpus[node] for node in passed)
            state.flights.approve(_uid(pod), judged.ask, chosen, now_ms())
        else:
            ids = verdicts.node_ids[verdicts.fits]
            state.ledger.approve(_uid(pod), judged.ask, ids, now_ms())
    result["FailedNodes"] = verdicts.failed()
    result["FailedAndUnresolvableNodes"] = verdicts.unresolvable_nodes()
    if nodes is None:
        result["NodeNames"] = passed
    else:
        kept = set(passed)
        items = [
            i for i in nodes.get("items") or [] if (i.get("metadata") or {}).get("name") in kept
        ]
        result["Nodes"] = {**nodes, "items": items}
    return _json(result)


@router.post(
    "/prioritize",
    response_model=list[HostPriority],
    responses={**error_responses(body=True), **_INVALID},
    openapi_extra=_documented(ExtenderArgs),
)
async def extender_prioritize(request: Request) -> Response:
    pod, names, _ = await _args(request)
    state: ExtenderState = request.app.state.extender
    last, uid = state.last, (pod.get("metadata") or {}).get("uid")
    if last is not None and uid and last[0] == uid and now_ms() - last[1] < _REUSE_MS:
        scores = last[2].priorities(names)
        return _json([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)])
    try:
        judged = _judge(request, pod, names, explain=False)
    except PodError:
        judged = None
    scores = [0] * len(names) if judged is None else judged.verdicts.priorities()
    return _json([{"Host": n, "Score": s} for n, s in zip(names, scores, strict=True)])


@router.post(
    "/bind",
    response_model=ExtenderBindingResult,
    responses={**error_responses(body=True), **_INVALID},
    openapi_extra=_documented(ExtenderBindingArgs),
)
async def extender_bind(request: Request) -> Response:
    body = await _body(request)
    fields = [body.get(k) for k in ("PodNamespace", "PodName", "PodUID", "Node")]
    for key, value in zip(("PodNamespace", "PodName", "PodUID", "Node"), fields, strict=True):
        if not isinstance(value, str) or not value:
            raise _invalid(key, "must be a non-empty string")
    namespace, name, uid, node = (str(v) for v in fields)
    target = PodRef(namespace, name, uid)
    state: ExtenderState = request.app.state.extender
    if state.binder is None:
        return _json({"Error": "Fairlane has no Kubernetes API configured (FAIRLANE_KUBE_API_URL)"})
    if (share := state.flights.flying(uid)) is not None:
        return _json({"Error": await _bind_share(request, target, node, share)})
    pod = state.ledger.flying(uid)
    try:
        await state.binder(target, node, {})
    except Exception as exc:  # noqa: BLE001 - reported to kube-scheduler, which retries
        return _json({"Error": f"binding {namespace}/{name} to {node}: {exc}"})
    if pod is not None:
        state.ledger.bind(uid, node, pod)
    return _json({"Error": ""})


async def _bind_share(request: Request, pod: PodRef, node: str, share: PodShare) -> str:
    """Record the pod's share on ``node`` in Postgres, then bind the pod with its
    annotations; the error for kube-scheduler ("" when bound). A share that was
    recorded is released again if the pod cannot be bound."""
    runtime: Runtime = request.app.state.runtime
    state: ExtenderState = request.app.state.extender
    assert state.binder is not None
    named = f"{pod.namespace}/{pod.name}"
    try:
        placement, _ = await runtime.service.place(pod_share_request(pod, share, node))
    except SchedulerError as exc:  # no room any more (another replica's), quota, outage
        return f"recording the GPU share of {named} on {node}: {exc}"
    finally:
        state.flights.land(pod.uid)  # the ledger counts the placement from here
    try:
        await state.binder(pod, node, share_annotations(placement))
    except Exception as exc:  # noqa: BLE001 - reported to kube-scheduler, which retries
        await runtime.service.release(placement.id)
        return f"binding {named} to {node}: {exc}"
    return ""
