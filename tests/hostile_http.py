"""Hostile HTTP clients of the scheduler's bounded bodies (api/bodies.py), over a raw
socket: a body of any size streamed from a generator (one 64 KiB chunk, sent again and
again: never held), and a body that trickles a byte at a time. Each reads the answer
while it sends, as a server that answers early and closes expects, and times the
answer's first byte; the integration test and the chaos suite's rows share them."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

from tests.chaos.sustained import rss_mib

__all__ = ["GIB", "Answer", "peak_rss_mib", "send_huge_body", "trickle_body"]

GIB = 1 << 30
_CHUNK = b"x" * 65536


@dataclass(frozen=True)
class Answer:
    status: int | None  # None: the connection ended with no answer
    first_byte_s: float  # from the end of the headers to the answer's first byte
    sent_bytes: int  # of the body, before the answer or the connection's end
    closed: bool  # the server closed the connection after answering


def _chunks(total_bytes: int, *, chunked: bool) -> Iterator[bytes]:
    for _ in range(total_bytes // len(_CHUNK)):
        yield b"%x\r\n%s\r\n" % (len(_CHUNK), _CHUNK) if chunked else _CHUNK
    if chunked:
        yield b"0\r\n\r\n"


async def _exchange(
    url: str, path: str, headers: dict[str, str], body: AsyncIterator[bytes], timeout_s: float
) -> Answer:
    """Send the headers, then ``body`` while reading the status line."""
    where = urlsplit(url)
    host, port = where.hostname or "127.0.0.1", where.port or 80
    reader, writer = await asyncio.open_connection(host, port)
    lines = [f"POST {path} HTTP/1.1", f"Host: {host}:{port}", "Content-Type: application/json"]
    writer.write(
        ("\r\n".join([*lines, *(f"{k}: {v}" for k, v in headers.items())]) + "\r\n\r\n").encode()
    )
    sent = 0

    async def pump() -> None:
        nonlocal sent
        with contextlib.suppress(ConnectionError):
            async for chunk in body:
                writer.write(chunk)
                await writer.drain()
                sent += len(chunk)

    started = time.monotonic()
    pumping = asyncio.create_task(pump())
    status: int | None = None
    try:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            line = await asyncio.wait_for(reader.readuntil(b"\r\n"), timeout_s)
            status = int(line.split()[1])
        first_byte_s = time.monotonic() - started
        closed = status is not None and await _closed(reader)
    finally:
        pumping.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await pumping
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    return Answer(status, first_byte_s, sent, closed)


async def _closed(reader: asyncio.StreamReader, within_s: float = 5) -> bool:
    """Whether the server ends the connection (end of stream or reset) after its answer."""
    try:
        async with asyncio.timeout(within_s):
            while await reader.read(65536):
                pass
    except ConnectionError:
        return True
    except TimeoutError:
        return False
    return True


async def send_huge_body(
    url: str,
    path: str,
    total_bytes: int,
    *,
    token: str | None = None,
    chunked: bool = False,
    timeout_s: float = 30,
) -> Answer:
    """POST ``total_bytes`` of body, declared (Content-Length) or ``chunked``."""
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    headers |= {"Transfer-Encoding": "chunked"} if chunked else {"Content-Length": str(total_bytes)}

    async def body() -> AsyncIterator[bytes]:
        for chunk in _chunks(total_bytes, chunked=chunked):
            yield chunk

    return await _exchange(url, path, headers, body(), timeout_s)


async def trickle_body(
    url: str, path: str, *, token: str, every_s: float, timeout_s: float = 60
) -> Answer:
    """POST a 1 KiB body (declared) one byte every ``every_s`` seconds."""
    headers = {"Authorization": f"Bearer {token}", "Content-Length": "1024"}

    async def body() -> AsyncIterator[bytes]:
        for _ in range(1024):
            yield b" "
            await asyncio.sleep(every_s)

    return await _exchange(url, path, headers, body(), timeout_s)


@contextlib.asynccontextmanager
async def peak_rss_mib(pid: int, every_s: float = 0.02) -> AsyncIterator[list[float]]:
    """The resident memory of ``pid`` (MiB) before, then its peak while the block runs:
    the list yielded holds [before, peak], the peak filled in when the block ends."""
    figures = [rss_mib(pid)]
    peak = figures[0]
    done = asyncio.Event()

    async def sample() -> None:
        nonlocal peak
        while not done.is_set():
            peak = max(peak, rss_mib(pid))
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(done.wait(), every_s)

    sampling = asyncio.create_task(sample())
    try:
        yield figures
    finally:
        done.set()
        await sampling
        figures.append(max(peak, rss_mib(pid)))
