"""The fleet dashboard: one page, its vendored assets, a login, and server-sent events.

The page itself holds no data and is served to anyone; everything it shows comes from
``/dashboard/events`` and ``/dashboard/gpus/{uuid}/history``, read-only and behind the
API's bearer tokens. A browser's EventSource cannot send an Authorization header, so
``POST /dashboard/session`` checks a token once and sets it as an HttpOnly, SameSite
cookie scoped to ``/dashboard``; the header and a ``?token=`` query parameter work too.
A namespace's token sees the whole fleet (as ``/v1/nodes`` does) but only its own
namespace's placements and queue.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import AsyncGenerator
from importlib import resources
from typing import Annotated, Any

from fastapi import APIRouter, Depends, Request, Response, status
from fastapi.responses import HTMLResponse, JSONResponse, StreamingResponse
from pydantic import BaseModel

from fairlane_scheduler.adapters.dashboard_feed import DashboardFeed
from fairlane_scheduler.api.auth import DASHBOARD_COOKIE, Caller, TokenTable, ViewerDep
from fairlane_scheduler.core.dashboard import Frame, diff_frames, placement_row
from fairlane_scheduler.errors import NotFoundError

__all__ = ["frame_events", "router"]

router = APIRouter(prefix="/dashboard", include_in_schema=False)

_STATIC = resources.files("fairlane_scheduler.dashboard") / "static"
_ASSETS = {  # name -> media type: the only files served, nothing looked up by path
    "dashboard.js": "text/javascript",
    "dashboard.css": "text/css",
    "vendor/uplot.min.js": "text/javascript",
    "vendor/uplot.min.css": "text/css",
}
_KEEPALIVE_FRAMES = 15  # with nothing to send, a comment line this often keeps proxies open
_NO_STORE = {"Cache-Control": "no-store"}
# The page runs only its own files: no inline script, nothing from elsewhere, no framing.
_PAGE_HEADERS = {
    **_NO_STORE,
    "Content-Security-Policy": (
        "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
        "connect-src 'self'; frame-ancestors 'none'; base-uri 'none'; form-action 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}


def _feed(request: Request) -> DashboardFeed:
    feed: DashboardFeed = request.app.state.dashboard
    return feed


FeedDep = Annotated[DashboardFeed, Depends(_feed)]


class SessionIn(BaseModel):
    token: str


@router.get("", response_class=HTMLResponse)
async def page() -> HTMLResponse:
    return HTMLResponse((_STATIC / "index.html").read_text(), headers=_PAGE_HEADERS)


@router.get("/static/{name:path}")
async def asset(name: str) -> Response:
    media_type = _ASSETS.get(name)
    if media_type is None:
        raise NotFoundError(f"no dashboard asset {name!r}")
    return Response(
        (_STATIC / name).read_bytes(),
        media_type=media_type,
        headers={"X-Content-Type-Options": "nosniff"},
    )


@router.get("/session")
async def whoami(caller: ViewerDep) -> dict[str, Any]:
    return {"namespace": caller.namespace, "admin": caller.is_admin}


@router.post("/session", status_code=status.HTTP_204_NO_CONTENT)
async def login(body: SessionIn, request: Request, response: Response) -> None:
    """Check the token, then hand it back as the dashboard's cookie."""
    tokens: TokenTable = request.app.state.tokens
    tokens.caller(f"Bearer {body.token}")  # 401 if unknown
    response.set_cookie(
        DASHBOARD_COOKIE,
        body.token,
        path="/dashboard",
        httponly=True,
        samesite="strict",
        secure=request.url.scheme == "https",
    )


@router.delete("/session", status_code=status.HTTP_204_NO_CONTENT)
async def logout(response: Response) -> None:
    response.delete_cookie(DASHBOARD_COOKIE, path="/dashboard")


@router.get("/gpus/{uuid}/history")
async def history(uuid: str, feed: FeedDep, _: ViewerDep) -> JSONResponse:
    series = feed.history.of(uuid)
    if series is None:
        raise NotFoundError(f"no scores for GPU {uuid!r}")
    return JSONResponse(
        {"uuid": uuid, "ts_ms": [t for t, _ in series], "score": [s for _, s in series]}
    )


@router.get("/events")
async def events(feed: FeedDep, caller: ViewerDep) -> StreamingResponse:
    """``event: frame`` once a second at most: the first is the whole fleet, the next
    only the node rows that changed; lists and counters come when they change."""
    return StreamingResponse(
        frame_events(feed, caller),
        media_type="text/event-stream",
        headers={**_NO_STORE, "X-Accel-Buffering": "no"},
    )


def _visible(caller: Caller, frame: Frame) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    scope = caller.scope()
    return (
        [
            placement_row(p, idle=p.id in frame.idle)
            for p in frame.placements
            if scope in (None, p.namespace)
        ],
        [placement_row(p) for p in frame.pending if scope in (None, p.namespace)],
    )


async def frame_events(feed: DashboardFeed, caller: Caller) -> AsyncGenerator[str, None]:
    """The text of the event stream: one ``frame`` event per new frame that changes
    something for this caller, a keepalive comment now and then otherwise."""
    sent: dict[str, Any] = {}
    rows_sent = None
    quiet = 0
    # aclosing: a page that goes away closes the feed's generator now (and so stops
    # counting as a watcher), not whenever the garbage collector finds it.
    async with contextlib.aclosing(feed.frames()) as frames:
        async for frame in frames:
            rows, removed = diff_frames(rows_sent, frame.rows)
            placements, pending = _visible(caller, frame)
            payload: dict[str, Any] = {"seq": frame.seq, "ts_ms": frame.ts_ms}
            if rows_sent is None:
                payload.update(full=True, threshold=feed.policy.threshold)
            if rows or rows_sent is None:
                payload["rows"] = rows
            if removed:
                payload["removed"] = removed
            for key, value in (
                ("placements", placements),
                ("pending", pending),
                ("counters", dict(frame.counters)),
            ):
                if sent.get(key) != value:
                    payload[key] = sent[key] = value
            rows_sent = frame.rows
            if len(payload) > 2:  # more than seq and time: something changed
                quiet = 0
                yield f"event: frame\ndata: {json.dumps(payload, separators=(',', ':'))}\n\n"
            elif (quiet := quiet + 1) >= _KEEPALIVE_FRAMES:
                quiet = 0
                yield ": keepalive\n\n"
