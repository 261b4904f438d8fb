"""The incumbents `uringkit net bench` measures against: the echo server an asyncio user
writes (an `asyncio.Protocol` whose `data_received` writes the data back), on asyncio's
default loop or on uvloop. Run as a subprocess so that it has its own GIL:

    python -m uringkit.net.peers asyncio|uvloop HOST PORT

It prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import asyncio
import sys
from typing import cast


class Echo(asyncio.Protocol):
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # (uvloop's transports are not asyncio.Transport subclasses, but write the same)
        self.t = cast(asyncio.WriteTransport, transport)

    def data_received(self, data: bytes) -> None:
        self.t.write(data)


async def serve(host: str, port: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Echo, host, port, backlog=1024)
    print(server.sockets[0].getsockname()[1], flush=True)
    async with server:
        await server.serve_forever()


def main(argv: list[str]) -> int:
    kind, host, port = argv[0], argv[1], int(argv[2])
    if kind == "uvloop":
        import uvloop

        uvloop.run(serve(host, port))
    elif kind == "asyncio":
        asyncio.run(serve(host, port))
    else:
        print(f"unknown server {kind!r}: asyncio or uvloop", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
