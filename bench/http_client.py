"""A lean HTTP/1.1 client for the real-HTTP load: one keep-alive connection, one request
at a time, the answer parsed by httptools (uvicorn's own parser). httpx over sockets
cost the loader ~5 ms of CPU a place + release pair, more than the scheduler it
measured, so on two cores the loader set the rate (docs/benchmarks-history.md)."""

from __future__ import annotations

import asyncio
from urllib.parse import urlsplit

import httptools

__all__ = ["Connection"]


class _Answer:
    """httptools' callbacks: the body, and whether the message is complete."""

    def __init__(self) -> None:
        self.body = bytearray()
        self.complete = False

    def on_body(self, body: bytes) -> None:
        self.body += body

    def on_message_complete(self) -> None:
        self.complete = True


class Connection:
    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader, self._writer = reader, writer
        host, port = writer.get_extra_info("peername")[:2]
        self._host = f"Host: {host}:{port}\r\n".encode()

    @classmethod
    async def open(cls, url: str) -> Connection:
        parts = urlsplit(url)
        reader, writer = await asyncio.open_connection(parts.hostname, parts.port or 80)
        return cls(reader, writer)

    async def request(self, method: str, path: str, body: bytes = b"") -> tuple[int, bytes]:
        """The status and body of the answer (the connection stays open)."""
        self._writer.write(
            b"%s %s HTTP/1.1\r\n%sContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
            % (method.encode(), path.encode(), self._host, len(body), body)
        )
        answer = _Answer()
        parser = httptools.HttpResponseParser(answer)
        while not answer.complete:
            data = await self._reader.read(65536)
            if not data:
                raise ConnectionError(f"the server closed the connection during {method} {path}")
            parser.feed_data(data)
        return parser.get_status_code(), bytes(answer.body)

    async def close(self) -> None:
        self._writer.close()
        await self._writer.wait_closed()
