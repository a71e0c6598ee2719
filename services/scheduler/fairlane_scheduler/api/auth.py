"""Bearer-token authentication: a token is bound to one namespace, or is the admin's.

A namespace's caller sees and changes only its own placements (another's look absent);
the admin sees all and sets quotas. With ``auth_disabled`` every caller is the admin,
which the scheduler logs loudly at start.
"""

from __future__ import annotations

import hmac
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request

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
        admin = settings.admin_token
        self._tokens: list[tuple[bytes, str | None]] = [
            (t.get_secret_value().encode(), ns) for ns, t in settings.namespace_tokens.items()
        ]
        if admin is not None:
            self._tokens.append((admin.get_secret_value().encode(), None))

    def caller(self, authorization: str | None) -> Caller:
        if self.disabled:
            return Caller(None)
        scheme, _, token = (authorization or "").partition(" ")
        if scheme.lower() != "bearer" or not token:
            raise UnauthorizedError("send Authorization: Bearer <token>")
        found: Caller | None = None
        for known, namespace in self._tokens:  # compare with every token: constant time
            if hmac.compare_digest(known, token.encode()):
                found = Caller(namespace)
        if found is None:
            raise UnauthorizedError("unknown token")
        return found


def _caller(request: Request) -> Caller:
    tokens: TokenTable = request.app.state.tokens
    return tokens.caller(request.headers.get("authorization"))


CallerDep = Annotated[Caller, Depends(_caller)]


def _viewer(request: Request) -> Caller:
    """The dashboard's reads: the Authorization header, else the login cookie, else a
    ``token`` query parameter (for clients that can set neither)."""
    tokens: TokenTable = request.app.state.tokens
    header = request.headers.get("authorization")
    if header is None:
        token = request.cookies.get(DASHBOARD_COOKIE) or request.query_params.get("token")
        header = None if token is None else f"Bearer {token}"
    return tokens.caller(header)


ViewerDep = Annotated[Caller, Depends(_viewer)]
