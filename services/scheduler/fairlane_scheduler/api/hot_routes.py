"""A lean path for the two routes every placement takes: POST /v1/placements and
DELETE /v1/placements/{id}, answered without FastAPI's routing, dependency solving and
inner middleware (0.15 ms of CPU a request for a route that does nothing, more for
these with their dependencies: docs/benchmarks-history.md).

It serves a request only when it already knows the answer is FastAPI's: a JSON body
that parses and validates as :class:`PlacementIn`, a token the table accepts, a
canonical UUID in the path. Anything else (no or another content type, a body that
does not parse or validate, a missing or unknown token) goes on to the FastAPI routes
with the body replayed, which answer 400, 401 or 422 naming the field, as before; the
routes also keep the OpenAPI schema. Both run the same handlers (``routes.place``,
``routes.release``), and what those raise (403, 404, 409, 429, 503) is answered from
the one error table (``error_answer``), as FastAPI's handler does.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable

import orjson
from fastapi import FastAPI
from pydantic import ValidationError
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from fairlane_scheduler.api.auth import Caller, TokenTable
from fairlane_scheduler.api.bodies import header, replay
from fairlane_scheduler.api.deps import Runtime
from fairlane_scheduler.api.errors import error_answer
from fairlane_scheduler.api.routes import place, release
from fairlane_scheduler.api.schemas import PlacementIn
from fairlane_scheduler.errors import SchedulerError

__all__ = ["HotRoutes"]

_PLACEMENTS = "/v1/placements"
_ONE = re.compile(r"/v1/placements/([0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12})")


class HotRoutes:
    """ASGI middleware in front of the FastAPI routes (see the module's docstring)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            method, path = scope["method"], scope["path"]
            if method == "POST" and path == _PLACEMENTS:
                await self._place(scope, receive, send)
                return
            if method == "DELETE" and (found := _ONE.fullmatch(path)) is not None:
                await self._release(scope, receive, send, found.group(1))
                return
        await self.app(scope, receive, send)

    async def _place(self, scope: Scope, receive: Receive, send: Send) -> None:
        body = await _read_body(receive)
        if body is None:
            return  # the client went away
        caller = _caller(scope)
        request = _placement_in(scope, body) if caller is not None else None
        if caller is None or request is None:
            await self.app(scope, replay(body, receive), send)
            return
        await _answer(scope, receive, send, place(_runtime(scope), caller, request))

    async def _release(self, scope: Scope, receive: Receive, send: Send, placement_id: str) -> None:
        caller = _caller(scope)
        if caller is None:
            await self.app(scope, receive, send)
            return
        await _answer(scope, receive, send, release(_runtime(scope), caller, placement_id))


async def _answer(
    scope: Scope, receive: Receive, send: Send, answering: Awaitable[Response]
) -> None:
    try:
        response = await answering
    except SchedulerError as exc:
        response = error_answer(exc, scope["method"], scope["path"])
    await response(scope, receive, send)


def _app(scope: Scope) -> FastAPI:
    app: FastAPI = scope["app"]
    return app


def _runtime(scope: Scope) -> Runtime:
    runtime: Runtime = _app(scope).state.runtime
    return runtime


def _caller(scope: Scope) -> Caller | None:
    """The token's caller; None where FastAPI's route must answer (401)."""
    tokens: TokenTable = _app(scope).state.tokens
    try:
        return tokens.caller(header(scope, b"authorization"))
    except SchedulerError:
        return None


def _placement_in(scope: Scope, body: bytes) -> PlacementIn | None:
    """The body as FastAPI would read it; None where FastAPI must answer (400, 422)."""
    content_type = (header(scope, b"content-type") or "").partition(";")[0].strip()
    if content_type.lower() != "application/json":
        return None
    try:
        return PlacementIn.model_validate(orjson.loads(body))
    except (orjson.JSONDecodeError, ValidationError):
        return None


async def _read_body(receive: Receive) -> bytes | None:
    chunks = []
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)
