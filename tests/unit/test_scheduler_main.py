"""``python -m fairlane_scheduler`` serves on uvloop, the loop its dependencies pin."""

from __future__ import annotations

import asyncio
import socket

import pytest
import uvicorn
import uvloop

import fairlane_scheduler.__main__ as entry


def test_the_server_runs_on_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    loops: list[type[asyncio.AbstractEventLoop]] = []

    async def no_preflight(settings: object) -> None:
        return None

    async def serve(self: uvicorn.Server, sockets: list[socket.socket] | None = None) -> None:
        loops.append(type(asyncio.get_running_loop()))
        self.started = True

    monkeypatch.setattr(entry, "_preflight", no_preflight)
    monkeypatch.setattr(uvicorn.Server, "serve", serve)
    entry.main(["--auth-disabled"])
    assert loops == [uvloop.Loop]
