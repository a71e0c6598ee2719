"""Which listener serves which routes, when the extender has a port of its own.

A NetworkPolicy sees ports, not paths: for only the control plane (kube-scheduler) to
reach the extender, the extender must listen on a port of its own. With
``extender_port`` set, the scheduler listens on both ports (one process, one app, one
view of the fleet) and this gate answers 404 to the extender's routes on the main port
and to everything but the extender on the extender port; the probes answer on both.
Without it, everything is served on the one port, as before.
"""

from __future__ import annotations

from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Receive, Scope, Send

__all__ = ["EXTENDER_PREFIX", "ExtenderPortGate"]

EXTENDER_PREFIX = "/v1/extender"
_BOTH = frozenset({"/healthz", "/readyz"})


class ExtenderPortGate:
    """ASGI middleware: route by the local port the request came in on."""

    def __init__(self, app: ASGIApp, *, extender_port: int) -> None:
        self.app = app
        self._port = extender_port

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["path"] not in _BOTH:
            server = scope.get("server")
            on_extender_port = server is not None and server[1] == self._port
            is_extender = scope["path"].startswith(EXTENDER_PREFIX + "/")
            if is_extender != on_extender_port:
                where = "the extender port" if is_extender else "the API port"
                response = JSONResponse(
                    {"error": "not_found", "detail": f"served on {where} only"}, 404
                )
                await response(scope, receive, send)
                return
        await self.app(scope, receive, send)
