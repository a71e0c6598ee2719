"""Bounded request bodies: every body is read here, in front of every route, parser and
dependency, and only as far as it may go.

FastAPI reads a body whole before a route's dependencies (authentication among them)
run: an unauthenticated 300 MB POST cost the scheduler 1.2 GB of memory before its 401,
and a client that trickles a byte every few seconds holds its request open as long as
it likes (issue 35). So, for a request that carries a body, in this order:

1. on a route that takes a bearer token (everything under ``/v1/`` but the extender's
   ``/v1/extender/``, which the network guards: docs/security.md), the Authorization
   header must name a token the table knows, else 401 before a byte of the body is read.
   The route's own dependency still binds the caller to its namespace;
2. a declared ``Content-Length`` above the route's limit: 413, unread;
3. the body is read and counted as it comes: 413 the moment it passes the limit (a
   chunked body declares no length), 408 when it is not all there within
   ``timeout_s`` of the headers;
4. the route gets the body in one message, then the client's own ``receive``.

Every early answer says ``connection: close``, so uvicorn closes the connection instead
of reading, and throwing away, the rest of the body. Not at once, though: a socket
closed with unread data makes the kernel reset the connection, and the reset throws
away what the client had received but not read yet, its answer among it (the chaos
suite's 1 GB client under load saw a reset, not its 401, when the scheduler closed
0.2 s after answering). So the answer lingers a second, unread: uvicorn stops reading
once 64 KiB wait, the client's sending stalls, and nothing is spent on the rest of the
body meanwhile; then the connection is closed. A request without a body passes
untouched (the event stream keeps its ``receive`` for the client's disconnect).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from fairlane_scheduler.api.auth import TokenTable
from fairlane_scheduler.api.errors import error_answer
from fairlane_scheduler.api.listeners import EXTENDER_PREFIX
from fairlane_scheduler.errors import BodyTimeoutError, BodyTooLargeError, SchedulerError

__all__ = ["BodyLimits", "BoundedBodies", "header", "replay"]

_API_PREFIX = "/v1/"
_LINGER_S = 1.0  # for the client to read its answer before the close resets it


@dataclass(frozen=True)
class BodyLimits:
    """The largest body of the API's routes and of the extender's (bytes), and how long
    a whole body may take to arrive after its headers (seconds)."""

    api_bytes: int
    extender_bytes: int
    timeout_s: float

    def of(self, path: str) -> int:
        return self.extender_bytes if path.startswith(EXTENDER_PREFIX + "/") else self.api_bytes


def header(scope: Scope, name: bytes) -> str | None:
    """The first value of the (lower-case) header ``name``."""
    for key, value in scope["headers"]:
        if key == name:
            return str(value.decode("latin-1"))
    return None


def replay(body: bytes, receive: Receive) -> Receive:
    """``receive`` for the app behind: the body already read, then the client's own."""
    sent = False

    async def replayed() -> Message:
        nonlocal sent
        if sent:
            return await receive()
        sent = True
        return {"type": "http.request", "body": body, "more_body": False}

    return replayed


class BoundedBodies:
    """ASGI middleware, outermost: the module's docstring says what it does and why."""

    def __init__(self, app: ASGIApp, *, limits: BodyLimits) -> None:
        self.app = app
        self._limits = limits

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or not _has_body(scope):
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        try:
            if path.startswith(_API_PREFIX) and not path.startswith(EXTENDER_PREFIX + "/"):
                tokens: TokenTable = scope["app"].state.tokens
                tokens.caller(header(scope, b"authorization"))  # 401 if none or unknown
            body = await self._read(scope, receive, self._limits.of(path))
        except SchedulerError as exc:
            await _refuse(exc, scope, receive, send)
            return
        if body is not None:  # None: the client went away
            await self.app(scope, replay(body, receive), send)

    async def _read(self, scope: Scope, receive: Receive, limit: int) -> bytes | None:
        declared = _content_length(scope)
        if declared is not None and declared > limit:
            raise BodyTooLargeError(f"{declared} bytes pass this route's limit of {limit}")
        chunks, size = [], 0
        try:
            async with asyncio.timeout(self._limits.timeout_s):
                while True:
                    message = await receive()
                    if message["type"] != "http.request":
                        return None
                    chunk: bytes = message.get("body", b"")
                    size += len(chunk)
                    if size > limit:
                        raise BodyTooLargeError(
                            f"the body passes this route's limit of {limit} bytes"
                        )
                    chunks.append(chunk)
                    if not message.get("more_body", False):
                        return b"".join(chunks)
        except TimeoutError:
            raise BodyTimeoutError(
                f"the body was not all sent within {self._limits.timeout_s:g} s"
            ) from None


async def _refuse(exc: SchedulerError, scope: Scope, receive: Receive, send: Send) -> None:
    """Answer ``exc`` at once, linger (the module's docstring says why), then close."""
    response = error_answer(exc, scope["method"], scope["path"])
    response.headers["connection"] = "close"
    start = {"status": response.status_code, "headers": response.raw_headers}
    await send({"type": "http.response.start", **start})
    await send({"type": "http.response.body", "body": response.body, "more_body": True})
    await asyncio.sleep(_LINGER_S)  # the answer is all out; the response ends, uvicorn closes
    await send({"type": "http.response.body", "body": b"", "more_body": False})


def _content_length(scope: Scope) -> int | None:
    """The declared length; None when absent (chunked) or not a number (then counted)."""
    value = header(scope, b"content-length")
    try:
        return None if value is None else int(value)
    except ValueError:
        return None


def _has_body(scope: Scope) -> bool:
    """HTTP/1.1: a request has a body when it declares a transfer coding (chunked) or a
    length other than 0; with neither it has none."""
    if header(scope, b"transfer-encoding") is not None:
        return True
    length = header(scope, b"content-length")
    return length is not None and length.strip() != "0"
