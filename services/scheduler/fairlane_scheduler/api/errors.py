"""The one table from scheduler errors to HTTP answers. Nothing leaks a stack trace.

Routes name the errors they can raise (:func:`error_responses`), so the OpenAPI schema
documents every status a route really returns, from this same table.
"""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exception_handlers import http_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match

from fairlane_scheduler.errors import (
    BodyTimeoutError,
    BodyTooLargeError,
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

__all__ = [
    "HTTP_STATUS",
    "DetailOut",
    "ErrorOut",
    "error_answer",
    "error_responses",
    "install_error_handlers",
]

log = logging.getLogger("fairlane.scheduler.api")

#: error class -> (HTTP status, ``error`` code in the body). The errors not here
#: (AllocationConflictError is retried inside, PodError answers in the extender's
#: ``Error`` field, MigrationError and DatabaseTlsError stop the start) become a 500 if
#: they ever escape.
HTTP_STATUS: dict[type[SchedulerError], tuple[int, str]] = {
    UnauthorizedError: (401, "unauthorized"),
    BodyTimeoutError: (408, "body_timeout"),
    BodyTooLargeError: (413, "body_too_large"),
    ForbiddenError: (403, "forbidden"),
    QuotaNeverFitsError: (403, "quota_exceeded"),
    NotFoundError: (404, "not_found"),
    JobConflictError: (409, "job_conflict"),
    NoCapacityError: (409, "no_capacity"),
    NotLiveError: (409, "not_live"),
    QuotaBusyError: (429, "quota_busy"),
    NotReadyError: (503, "not_ready"),
    DatabaseUnavailableError: (503, "database_unavailable"),
}
_RETRY_AFTER_S = "5"


class ErrorOut(BaseModel):
    """Every error answer: a stable code, a sentence for people, and for ``no_capacity``
    how many GPUs each filter rejected."""

    error: str
    detail: str
    rejections: dict[str, int] | None = None


_HEADERS: dict[int, dict[str, Any]] = {
    401: {"WWW-Authenticate": {"schema": {"type": "string"}, "description": "Bearer"}},
    429: {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}},
    503: {"Retry-After": {"schema": {"type": "string"}, "description": "seconds"}},
}


class DetailOut(BaseModel):
    """FastAPI's own answers (a body that is not JSON)."""

    detail: str


def error_responses(
    *errors: type[SchedulerError], body: bool = False
) -> dict[int | str, dict[str, Any]]:
    """The OpenAPI ``responses`` for a route that may raise ``errors``: one entry per
    status, naming every error code it stands for. ``body``: the route reads a JSON
    body, which FastAPI answers with 400 when it cannot even be parsed, and which the
    body limits (api/bodies.py) answer with 408 or 413."""
    codes: dict[int, list[str]] = {}
    for error in (*errors, BodyTimeoutError, BodyTooLargeError) if body else errors:
        status, code = HTTP_STATUS[error]
        codes.setdefault(status, []).append(code)
    out: dict[int | str, dict[str, Any]] = {}
    for status, names in sorted(codes.items()):
        entry: dict[str, Any] = {"model": ErrorOut, "description": " or ".join(names)}
        if status in _HEADERS:
            entry["headers"] = _HEADERS[status]
        out[status] = entry
    if body:
        out[400] = {"model": DetailOut, "description": "the body cannot be parsed as JSON"}
    return dict(sorted(out.items(), key=lambda kv: int(kv[0])))


def _status_of(exc: SchedulerError) -> tuple[int, str]:
    return next((v for t, v in HTTP_STATUS.items() if isinstance(exc, t)), (500, "internal_error"))


async def _scheduler_error(request: Request, exc: Exception) -> JSONResponse:
    assert isinstance(exc, SchedulerError)
    return error_answer(exc, request.method, request.url.path)


def error_answer(exc: SchedulerError, method: str, path: str) -> JSONResponse:
    """The answer to ``exc`` (logged when it is a 5xx), wherever the route ran."""
    status, code = _status_of(exc)
    body: dict[str, object] = {"error": code, "detail": str(exc)}
    if isinstance(exc, NoCapacityError):
        body["rejections"] = exc.reasons
    headers = {"Retry-After": _RETRY_AFTER_S} if status in (429, 503) else None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    if status >= 500:
        # A retryable 503 (no scores yet, Postgres away) is in the access log already, and
        # the background loops announce the outage once; one more line per request
        # would flood the log under load.
        level = logging.INFO if exc.retryable else logging.WARNING
        log.log(level, "%s %s: %s", method, path, exc)
    return JSONResponse(body, status_code=status, headers=headers)


_METHODS = ("DELETE", "GET", "HEAD", "OPTIONS", "PATCH", "POST", "PUT")


def allowed_methods(request: Request) -> list[str]:
    """Every method some route serves at this path. Starlette's own 405 names only the
    first route that matched the path (``POST`` where ``GET, POST`` are served), so ask
    every route, through its public ``matches``, which methods it would take here."""
    routes = request.app.router.routes
    return [
        method
        for method in _METHODS
        if any(r.matches({**request.scope, "method": method})[0] is Match.FULL for r in routes)
    ]


async def _http_error(request: Request, exc: Exception) -> Response:
    assert isinstance(exc, StarletteHTTPException)
    if exc.status_code == 405:
        headers = {**(exc.headers or {}), "Allow": ", ".join(allowed_methods(request))}
        exc = StarletteHTTPException(405, exc.detail, headers=headers)
    return await http_exception_handler(request, exc)


#: A name in an error's ``loc`` is cut to this many characters: a key the request
#: invented (an unknown field) may be as long as the body.
_LOC_CHARS = 64


def _shown(error: dict[str, Any]) -> dict[str, Any]:
    """One validation error as a client sees it: where (``loc``) and what (``type``,
    ``msg``, ``ctx``: the rule), never the value that broke it. FastAPI's own echoes
    it as ``input``, which let a 10 MB body come back whole in a 422 (issue 35), and
    made a 500 of values its JSON writer refuses (NaN, integers beyond 64 bits)."""
    loc = [p[:_LOC_CHARS] if isinstance(p, str) else p for p in error.get("loc", ())]
    return {k: v for k, v in error.items() if k != "input"} | {"loc": loc}


async def _invalid_request(request: Request, exc: Exception) -> Response:
    """FastAPI's 422, each error naming its field, none echoing what was sent."""
    assert isinstance(exc, RequestValidationError)
    errors = jsonable_encoder([_shown(e) for e in exc.errors()])
    return Response(
        orjson.dumps({"detail": errors}), status_code=422, media_type="application/json"
    )


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"error": "internal_error", "detail": "see the server log"}, 500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SchedulerError, _scheduler_error)
    app.add_exception_handler(StarletteHTTPException, _http_error)
    app.add_exception_handler(RequestValidationError, _invalid_request)
    app.add_exception_handler(Exception, _unexpected)
