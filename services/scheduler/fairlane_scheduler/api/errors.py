"""The one table from scheduler errors to HTTP answers. Nothing leaks a stack trace."""

from __future__ import annotations

import logging

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from fairlane_scheduler.errors import (
    DatabaseUnavailableError,
    ForbiddenError,
    JobConflictError,
    NoCapacityError,
    NotFoundError,
    NotLiveError,
    NotReadyError,
    QuotaExceededError,
    SchedulerError,
    UnauthorizedError,
)

__all__ = ["install_error_handlers"]

log = logging.getLogger("fairlane.scheduler.api")

_STATUS: dict[type[SchedulerError], tuple[int, str]] = {
    UnauthorizedError: (401, "unauthorized"),
    ForbiddenError: (403, "forbidden"),
    NotFoundError: (404, "not_found"),
    JobConflictError: (409, "job_conflict"),
    NoCapacityError: (409, "no_capacity"),
    NotLiveError: (409, "not_live"),
    NotReadyError: (503, "not_ready"),
    DatabaseUnavailableError: (503, "database_unavailable"),
}
_RETRY_AFTER_S = "5"


async def _scheduler_error(request: Request, exc: Exception) -> JSONResponse:
    status, code = next(
        (v for t, v in _STATUS.items() if isinstance(exc, t)), (500, "internal_error")
    )
    if isinstance(exc, QuotaExceededError):
        status, code = (429, "quota_busy") if exc.ever else (403, "quota_exceeded")
    body: dict[str, object] = {"error": code, "detail": str(exc)}
    if isinstance(exc, NoCapacityError):
        body["rejections"] = exc.reasons
    headers = {"Retry-After": _RETRY_AFTER_S} if status in (429, 503) else None
    if status == 401:
        headers = {"WWW-Authenticate": "Bearer"}
    if status >= 500:
        log.warning("%s %s: %s", request.method, request.url.path, exc)
    return JSONResponse(body, status_code=status, headers=headers)


async def _unexpected(request: Request, exc: Exception) -> JSONResponse:
    log.exception("unhandled error on %s %s", request.method, request.url.path)
    return JSONResponse({"error": "internal_error", "detail": "see the server log"}, 500)


def install_error_handlers(app: FastAPI) -> None:
    app.add_exception_handler(SchedulerError, _scheduler_error)
    app.add_exception_handler(Exception, _unexpected)
