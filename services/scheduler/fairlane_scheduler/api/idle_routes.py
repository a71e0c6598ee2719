"""HTTP routes of a namespace's idle policy, set like its quota (admin only).

``idle_lease_s``: once an ``idle`` event has warned that a placement of the namespace
holds GPUs it does not use, its lease ends at most this many seconds later for as long
as it stays idle (renewals cannot move it later). None: idle placements are announced
and nothing else happens.
"""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Depends, Request
from pydantic import BaseModel, ConfigDict, Field

from fairlane_scheduler.api.auth import CallerDep
from fairlane_scheduler.api.errors import error_responses
from fairlane_scheduler.api.routes import Namespace
from fairlane_scheduler.errors import DatabaseUnavailableError, ForbiddenError, UnauthorizedError
from fairlane_scheduler.idle_watch import IdleStore

__all__ = ["IdlePolicyIn", "IdlePolicyOut", "router"]

router = APIRouter()

_ERRORS = (UnauthorizedError, ForbiddenError, DatabaseUnavailableError)
_YEAR_S = 365 * 86_400


class IdlePolicyIn(BaseModel):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False, strict=True)

    idle_lease_s: Annotated[float, Field(gt=0, le=_YEAR_S)] | None = Field(
        description="an idle placement's lease ends at most this long after its idle event "
        "(none: idle placements are only announced)"
    )


class IdlePolicyOut(IdlePolicyIn):
    namespace: str


def _idle_store(request: Request) -> IdleStore:
    store: IdleStore = request.app.state.idle.store
    return store


IdleStoreDep = Annotated[IdleStore, Depends(_idle_store)]


@router.get(
    "/v1/idle-policies/{namespace}",
    response_model=IdlePolicyOut,
    responses=error_responses(*_ERRORS),
)
async def get_idle_policy(
    namespace: Namespace, store: IdleStoreDep, caller: CallerDep
) -> IdlePolicyOut:
    caller.require_namespace(namespace)
    return IdlePolicyOut(namespace=namespace, idle_lease_s=await store.idle_lease_s(namespace))


@router.put(
    "/v1/idle-policies/{namespace}",
    response_model=IdlePolicyOut,
    responses=error_responses(*_ERRORS, body=True),
)
async def set_idle_policy(
    namespace: Namespace, body: IdlePolicyIn, store: IdleStoreDep, caller: CallerDep
) -> IdlePolicyOut:
    """Admin only. Applies from the next idle check, to idle events announced before too."""
    caller.require_admin()
    await store.set_idle_lease_s(namespace, body.idle_lease_s)
    return await get_idle_policy(namespace, store, caller)
