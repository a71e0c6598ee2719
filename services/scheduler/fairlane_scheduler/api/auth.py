"""Bearer-token authentication: a token is bound to one namespace, or is the admin's.

A namespace's caller sees and changes only its own placements (another's look absent);
the admin sees all and sets quotas. With ``auth_disabled`` every caller is the admin,
which the scheduler logs loudly at start. Where tokens come from (settings, files that
are re-read when they change, hashes) is :mod:`fairlane_scheduler.api.tokens`.

A Kubernetes service-account token (a JWT) would be checked through the API server's
TokenReview; that needs the control plane this repo does not have yet, so such a token
is refused with a 401 that says TokenReview is not configured.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

from fairlane_scheduler.api.tokens import TokenSources, digest_of
from fairlane_scheduler.errors import ForbiddenError, UnauthorizedError
from fairlane_scheduler.settings import SchedulerSettings

__all__ = ["DASHBOARD_COOKIE", "Caller", "CallerDep", "TokenTable", "ViewerDep"]

#: The dashboard's login sets this cookie (HttpOnly): a browser's EventSource cannot send
#: an Authorization header, but it sends the cookies of its origin.
DASHBOARD_COOKIE = "fairlane_token"


@dataclass(frozen=True)
class Caller:
    namespace: str | None  # None: the admin

    @property
    def is_admin(self) -> bool:
        return self.namespace is None

    def scope(self) -> str | None:
        """The namespace this caller is confined to (None: all)."""
        return self.namespace

    def require_namespace(self, namespace: str) -> None:
        if not self.is_admin and namespace != self.namespace:
            raise ForbiddenError(
                f"this token is for namespace {self.namespace!r}, not {namespace!r}"
            )

    def require_admin(self) -> None:
        if not self.is_admin:
            raise ForbiddenError("this needs the admin token")


class TokenTable:
    def __init__(self, settings: SchedulerSettings) -> None:
        self.disabled = settings.auth_disabled
        self._sources = TokenSources(
            admin_token=settings.admin_token,
            namespace_tokens=settings.namespace_tokens,
            tokens_dir=settings.tokens_dir,
            tokens_file=settings.tokens_file,
            reload_interval_s=settings.tokens_reload_interval_s,
        )

    def caller(self, authorization: str | None) -> Caller:
        if self.disabled:
            return Caller(None)
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise UnauthorizedError("send Authorization: Bearer <token>")
        presented = digest_of(token)
        found: Caller | None = None
        for known, namespace in self._sources.table():  # compare with every one: constant time
            if hmac.compare_digest(known, presented) and found is None:
                found = Caller(namespace)
        if found is None:
            if _is_jwt(token):
                raise UnauthorizedError(
                    "unknown token; Kubernetes service-account tokens need TokenReview, "
                    "which is not configured on this scheduler"
                )
            raise UnauthorizedError("unknown token")
        return found


def _is_jwt(token: str) -> bool:
    """Shaped like a service-account token: three base64url parts, a JSON header."""
    return token.startswith("eyJ") and token.count(".") == 2


async def _caller(request: Request) -> Caller:
    # async: FastAPI runs a plain ``def`` dependency in a worker thread, per request.
    tokens: TokenTable = request.app.state.tokens
    return tokens.caller(request.headers.get("authorization"))


CallerDep = Annotated[Caller, Depends(_caller)]


async def _viewer(request: Request) -> Caller:
    """The dashboard's reads: the Authorization header, else the login cookie, else a
    ``token`` query parameter (for clients that can set neither)."""
    tokens: TokenTable = request.app.state.tokens
    header = request.headers.get("authorization")
    if header is None:
        token = request.cookies.get(DASHBOARD_COOKIE) or request.query_params.get("token")
        header = None if token is None else f"Bearer {token}"
    return tokens.caller(header)


ViewerDep = Annotated[Caller, Depends(_viewer)]
