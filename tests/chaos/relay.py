"""A TCP relay: ``python -m tests.chaos.relay LISTEN_HOST LISTEN_PORT TO_HOST TO_PORT``.

The partition scenario runs one inside the agent's network namespace (its 127.0.0.1 at
the broker's port, where the broker's advertised address sends the agent) and one on
the host side of the veth link, to the broker's real listener on the host's loopback.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys

__all__ = ["main"]


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(OSError):
        while data := await reader.read(65536):
            writer.write(data)
            await writer.drain()
    writer.close()


async def _serve(
    to_host: str, to_port: int, r: asyncio.StreamReader, w: asyncio.StreamWriter
) -> None:
    try:
        up_r, up_w = await asyncio.open_connection(to_host, to_port)
    except OSError:
        w.close()
        return
    await asyncio.gather(_pipe(r, up_w), _pipe(up_r, w))


async def _main(host: str, port: int, to_host: str, to_port: int) -> None:
    server = await asyncio.start_server(
        lambda r, w: _serve(to_host, to_port, r, w), host, port, reuse_address=True
    )
    async with server:
        await server.serve_forever()


def main() -> None:
    host, port, to_host, to_port = sys.argv[1:5]
    asyncio.run(_main(host, int(port), to_host, int(to_port)))


if __name__ == "__main__":
    main()
