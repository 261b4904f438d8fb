"""The echo servers `uringkit net bench` runs in their own process (own GIL):

- `asyncio`, `uvloop`: what an asyncio user writes — an `asyncio.Protocol` whose
  `data_received` writes the data back — on asyncio's default loop or on uvloop;
- `asyncio-sock`, `uvloop-sock`: a coroutine per connection with `loop.sock_accept`,
  `loop.sock_recv` and `loop.sock_sendall` (readiness from epoll, then the system call);
- `aio-sock`, `aio-sock-uvloop`: the same coroutines with `uringkit.aio.sock_*` (the
  operations themselves go through the loop's io_uring), on asyncio's loop or uvloop;
- `uringkit-loop`, `uringkit-loop-sock`: the Protocol server and the `loop.sock_*`
  coroutines on `uringkit.loop` (asyncio's loop waiting on io_uring instead of epoll;
  the Protocol's transport receives through the ring);
- `uringkit-loop-selector`: the Protocol server on `uringkit.loop` with asyncio's own
  readiness-based transports (`ring_transports=False`).

    python -m uringkit.net.peers KIND HOST PORT

It prints the port it listens on, then serves until killed.
"""

from __future__ import annotations

import asyncio
import socket
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


async def serve_sock(host: str, port: int, ring: bool) -> None:
    """A coroutine per connection on sock_* calls: the loop's, or uringkit.aio's."""
    loop = asyncio.get_running_loop()
    if ring:
        from uringkit import aio

        accept, recv, sendall = aio.sock_accept, aio.sock_recv, aio.sock_sendall
    else:
        accept, recv, sendall = loop.sock_accept, loop.sock_recv, loop.sock_sendall
    ls = socket.create_server((host, port), backlog=1024)
    ls.setblocking(False)
    print(ls.getsockname()[1], flush=True)

    async def conn(c: socket.socket) -> None:
        with c:
            while data := await recv(c, 65536):
                await sendall(c, data)

    tasks = set()
    while True:
        c, _ = await accept(ls)
        t = loop.create_task(conn(c))
        tasks.add(t)
        t.add_done_callback(tasks.discard)


KINDS = [
    "asyncio",
    "uvloop",
    "asyncio-sock",
    "uvloop-sock",
    "aio-sock",
    "aio-sock-uvloop",
    "uringkit-loop",
    "uringkit-loop-sock",
    "uringkit-loop-selector",
    "aio-sock-uringkit-loop",
]


def main(argv: list[str]) -> int:
    kind, host, port = argv[0], argv[1], int(argv[2])
    if kind not in KINDS:
        print(f"unknown server {kind!r}: one of {', '.join(KINDS)}", file=sys.stderr)
        return 2
    if kind in ("asyncio", "uvloop", "uringkit-loop", "uringkit-loop-selector"):
        coro = serve(host, port)
    else:
        coro = serve_sock(host, port, ring=kind.startswith("aio"))
    if "uvloop" in kind:
        import uvloop

        uvloop.run(coro)
    elif "uringkit-loop" in kind:
        import uringkit.loop

        transports = kind != "uringkit-loop-selector"
        with asyncio.Runner(
            loop_factory=lambda: uringkit.loop.new_event_loop(ring_transports=transports)
        ) as runner:
            runner.run(coro)
    else:
        asyncio.run(coro)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
