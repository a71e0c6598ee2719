"""HTTP routes: thin, they translate and delegate to the placement service."""

from __future__ import annotations

from typing import Annotated, Literal
from uuid import UUID

from fastapi import APIRouter, Path, Query, Response, status
from fastapi.responses import JSONResponse

from fairlane_scheduler.api.auth import Caller, CallerDep
from fairlane_scheduler.api.deps import Runtime, RuntimeDep
from fairlane_scheduler.api.errors import error_responses
from fairlane_scheduler.api.schemas import (
    CordonIn,
    GpuOut,
    NodeDetailOut,
    NodeOut,
    PlacementIn,
    PlacementOut,
    PlacementPage,
    QuotaIn,
    QuotaOut,
    RenewIn,
    placement_json,
)
from fairlane_scheduler.clock import now_ms
from fairlane_scheduler.core.nodes import gpu_states, node_summaries
from fairlane_scheduler.core.quota import Quota
from fairlane_scheduler.errors import (
    DatabaseUnavailableError,
    ForbiddenError,
    JobConflictError,
    NoCapacityError,
    NotFoundError,
    NotLiveError,
    NotReadyError,
    QuotaBusyError,
    QuotaNeverFitsError,
    SchedulerError,
    UnauthorizedError,
)

__all__ = ["place", "release", "router"]

router = APIRouter()

# Names that reach Postgres: what node and namespace names may be (no NUL, no spaces).
_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$"
NodeName = Annotated[str, Path(pattern=_NAME)]
Namespace = Annotated[str, Path(pattern=_NAME)]

_MAX_TIME_MS = 253_402_300_799_999  # 9999-12-31T23:59:59.999Z: the last instant Python holds

# What each route can answer besides success and 422, from the one error table: every
# route takes a token (401); those that read or write Postgres may find it down (503).
_TOKEN = (UnauthorizedError,)
_DB = (DatabaseUnavailableError,)


@router.post(
    "/v1/placements",
    response_model=PlacementOut,
    status_code=status.HTTP_201_CREATED,
    responses={
        200: {"description": "identical request: the original placement"},
        202: {"description": "queued: pending until it fits"},
        **error_responses(
            *_TOKEN,
            ForbiddenError,
            QuotaNeverFitsError,
            JobConflictError,
            NoCapacityError,
            QuotaBusyError,
            NotReadyError,
            *_DB,
            body=True,
        ),
    },
)
async def create_placement(body: PlacementIn, runtime: RuntimeDep, caller: CallerDep) -> Response:
    return await place(runtime, caller, body)


async def place(runtime: Runtime, caller: Caller, body: PlacementIn) -> Response:
    """POST /v1/placements once its body is read (here and in api/hot_routes.py)."""
    namespace = body.namespace or caller.namespace or "default"
    caller.require_namespace(namespace)
    try:
        with runtime.metrics.placement_s.time():
            placement, created = await runtime.service.place(body.to_core(namespace))
    except NoCapacityError:
        runtime.metrics.rejected.inc()
        raise
    (runtime.metrics.created if created else runtime.metrics.replayed).inc()
    if not created:
        return placement_json(placement, status.HTTP_200_OK)
    if placement.state == "pending":
        return placement_json(placement, status.HTTP_202_ACCEPTED)
    return placement_json(placement, status.HTTP_201_CREATED)


@router.get(
    "/v1/placements/{placement_id}",
    response_model=PlacementOut,
    responses=error_responses(*_TOKEN, NotFoundError, *_DB),
)
async def get_placement(placement_id: UUID, runtime: RuntimeDep, caller: CallerDep) -> PlacementOut:
    return PlacementOut.of(await runtime.service.get(str(placement_id), caller.scope()))


@router.get(
    "/v1/placements",
    response_model=PlacementPage,
    responses=error_responses(*_TOKEN, ForbiddenError, *_DB),
)
async def list_placements(
    *,
    runtime: RuntimeDep,
    caller: CallerDep,
    namespace: Annotated[str | None, Query(pattern=_NAME)] = None,
    state: Literal["pending", "placed", "released", "expired", "failed"] | None = None,
    limit: Annotated[int, Query(ge=1, le=500)] = 100,
    before_ms: Annotated[int | None, Query(ge=0, le=_MAX_TIME_MS)] = None,
) -> PlacementPage:
    """Newest first, ``limit`` per page; a namespace's token lists its own only."""
    if namespace is not None:
        caller.require_namespace(namespace)
    found = await runtime.service.page(namespace or caller.scope(), state, limit, before_ms)
    return PlacementPage(
        items=[PlacementOut.of(p) for p in found],
        next_before_ms=found[-1].created_at_ms if len(found) == limit else None,
    )


@router.delete(
    "/v1/placements/{placement_id}",
    response_model=PlacementOut,
    responses=error_responses(*_TOKEN, NotFoundError, *_DB),
)
async def release_placement(placement_id: UUID, runtime: RuntimeDep, caller: CallerDep) -> Response:
    """Free the placement's GPUs. Releasing an ended placement returns it unchanged."""
    return await release(runtime, caller, str(placement_id))


async def release(runtime: Runtime, caller: Caller, placement_id: str) -> Response:
    """DELETE /v1/placements/{placement_id} (here and in api/hot_routes.py)."""
    return placement_json(await runtime.service.release(placement_id, caller.scope()))


@router.post(
    "/v1/placements/{placement_id}/renew",
    response_model=PlacementOut,
    responses=error_responses(*_TOKEN, NotFoundError, NotLiveError, *_DB, body=True),
)
async def renew_placement(
    placement_id: UUID, runtime: RuntimeDep, caller: CallerDep, body: RenewIn | None = None
) -> PlacementOut:
    lease_s = None if body is None else body.lease_s
    return PlacementOut.of(await runtime.service.renew(str(placement_id), lease_s, caller.scope()))


@router.get("/v1/nodes", response_model=list[NodeOut], responses=error_responses(*_TOKEN))
async def list_nodes(runtime: RuntimeDep, _: CallerDep) -> list[NodeOut]:
    """Every node the scores mention, with how many GPUs are free and why the others are not."""
    summaries = node_summaries(runtime.fleet, runtime.live_gpus.current, runtime.policy, now_ms())
    return [NodeOut(**vars(s)) for s in summaries]


@router.get(
    "/v1/nodes/{name}",
    response_model=NodeDetailOut,
    responses=error_responses(*_TOKEN, NotFoundError),
)
async def get_node(name: str, runtime: RuntimeDep, _: CallerDep) -> NodeDetailOut:
    """One node's GPUs: score, its components, and the state the placement filter sees."""
    gpus = gpu_states(runtime.fleet, name, runtime.live_gpus.current, runtime.policy, now_ms())
    if gpus is None:
        raise NotFoundError(f"no scores for node {name!r}")
    return NodeDetailOut(node=name, gpus=[GpuOut(**vars(g)) for g in gpus])


@router.put(
    "/v1/nodes/{name}/cordon",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(*_TOKEN, ForbiddenError, *_DB, body=True),
)
async def cordon_node(
    name: NodeName, body: CordonIn, runtime: RuntimeDep, caller: CallerDep
) -> None:
    """Admin only: no new placements on this node (what runs there stays)."""
    caller.require_admin()
    await runtime.service.cordon(name, body.reason)


@router.delete(
    "/v1/nodes/{name}/cordon",
    status_code=status.HTTP_204_NO_CONTENT,
    responses=error_responses(*_TOKEN, ForbiddenError, *_DB),
)
async def uncordon_node(name: NodeName, runtime: RuntimeDep, caller: CallerDep) -> None:
    caller.require_admin()
    await runtime.service.uncordon(name)


@router.get(
    "/v1/quotas/{namespace}",
    response_model=QuotaOut,
    responses=error_responses(*_TOKEN, ForbiddenError, *_DB),
)
async def get_quota(namespace: Namespace, runtime: RuntimeDep, caller: CallerDep) -> QuotaOut:
    caller.require_namespace(namespace)
    quota, used = await runtime.service.quota(namespace)
    return QuotaOut(
        namespace=namespace,
        max_gpus=quota.max_gpus,
        max_gpus_per_model=dict(quota.max_gpus_per_model),
        used_gpus=sum(used.values()),
        used_by_model=used,
    )


@router.put(
    "/v1/quotas/{namespace}",
    response_model=QuotaOut,
    responses=error_responses(*_TOKEN, ForbiddenError, *_DB, body=True),
)
async def set_quota(
    namespace: Namespace, body: QuotaIn, runtime: RuntimeDep, caller: CallerDep
) -> QuotaOut:
    """Admin only. Applies to new placements; what is placed stays."""
    caller.require_admin()
    await runtime.service.set_quota(namespace, Quota(body.max_gpus, body.max_gpus_per_model))
    return await get_quota(namespace, runtime, caller)


@router.get("/healthz", include_in_schema=False)
async def healthz() -> dict[str, str]:
    return {"status": "ok"}


@router.get("/readyz", include_in_schema=False)
async def readyz(runtime: RuntimeDep) -> JSONResponse:
    """Ready when Postgres answers and the fleet view has caught up with the scores."""
    checks: dict[str, str] = {}
    try:
        await runtime.service.ping()
        checks["postgres"] = "ok"
    except SchedulerError as exc:
        checks["postgres"] = str(exc)
    if not runtime.follower.caught_up:
        checks["scores"] = "catching up with the scores topic"
    elif (fresh := runtime.fresh_gpus()) == 0:
        checks["scores"] = f"no fresh GPU scores yet ({len(runtime.fleet)} GPUs known, all stale)"
    else:
        checks["scores"] = f"ok ({fresh} fresh GPUs of {len(runtime.fleet)})"
    ready = all(v == "ok" or v.startswith("ok ") for v in checks.values())
    return JSONResponse(
        {"ready": ready, "checks": checks},
        status_code=200 if ready else 503,
        headers=None if ready else {"Retry-After": "5"},
    )
