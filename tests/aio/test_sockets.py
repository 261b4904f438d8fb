"""uringkit.aio.sock_*: loop.sock_*'s API through the loop's ring (or the loop itself
where io_uring is blocked), on asyncio's loop and uvloop, with real TCP sockets."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from uringkit import aio

from conftest import connected_pair, udp_pair

Run = Callable[[Callable[[], Awaitable[Any]]], Any]


def test_echo_of_every_size(run: Run) -> None:
    async def main() -> None:
        async with connected_pair(aio) as (ls, cl, conn):

            async def echo() -> None:
                while data := await aio.sock_recv(conn, 65536):
                    await aio.sock_sendall(conn, data)
                conn.close()

            server = asyncio.ensure_future(echo())
            for size in (1, 4096, 65537, 3_000_000):  # the last one: many partial sends
                msg = bytes(i & 0xFF for i in range(size))

                async def read_back(n: int = size) -> bytes:
                    got = bytearray()
                    while len(got) < n:
                        got += await aio.sock_recv(cl, 1 << 20)
                    return bytes(got)

                reader = asyncio.ensure_future(read_back())
                await aio.sock_sendall(cl, msg)
                assert await reader == msg
            cl.shutdown(socket.SHUT_WR)
            await server
            assert await aio.sock_recv(cl, 10) == b""  # the server closed: EOF

    run(main)


def test_recv_into_and_blocking_sockets(run: Run) -> None:
    async def main() -> None:
        async with connected_pair(aio) as (ls, cl, conn):
            cl.setblocking(True)  # the ring does not care; the loop fallback makes it non-blocking
            await aio.sock_sendall(conn, b"hello world")
            buf = bytearray(64)
            n = await aio.sock_recv_into(cl, buf)
            assert bytes(buf[:n]) == b"hello world"[:n] and n > 0
            with pytest.raises(TypeError):
                await aio.sock_recv_into(cl, b"read-only")
            with pytest.raises(ValueError, match="negative"):
                await aio.sock_recv(cl, -1)

    run(main)


def test_connect_errors_and_host_names(run: Run) -> None:
    async def main() -> None:
        probe = socket.socket()
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
        probe.close()  # nobody listens there now
        with socket.socket() as s, pytest.raises(ConnectionRefusedError):
            await aio.sock_connect(s, ("127.0.0.1", port))
        ls = socket.create_server(("127.0.0.1", 0))
        with socket.socket() as s:
            await aio.sock_connect(s, ("localhost", ls.getsockname()[1]))
            assert s.getpeername() == ls.getsockname()
        ls.close()

    run(main)


def test_send_to_a_vanished_peer_raises(run: Run) -> None:
    async def main() -> None:
        async with connected_pair(aio) as (ls, cl, conn):
            cl.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\0\0\0\0\0\0\0")
            cl.close()  # reset
            await asyncio.sleep(0.05)
            with pytest.raises((BrokenPipeError, ConnectionResetError)):
                for _ in range(100):
                    await aio.sock_sendall(conn, b"x" * 65536)

    run(main)


def test_many_connections_at_once(run: Run) -> None:
    """64 clients, each 20 round trips, against one server task per connection."""

    async def main() -> None:
        ls = socket.create_server(("127.0.0.1", 0), backlog=128)

        async def handle(c: socket.socket) -> None:
            with c:
                while data := await aio.sock_recv(c, 4096):
                    await aio.sock_sendall(c, data)

        async def acceptor() -> None:
            tasks = []
            for _ in range(64):
                c, _ = await aio.sock_accept(ls)
                tasks.append(asyncio.ensure_future(handle(c)))
            await asyncio.gather(*tasks)

        async def client(i: int) -> None:
            with socket.socket() as s:
                await aio.sock_connect(s, ls.getsockname())
                for j in range(20):
                    msg = b"%d-%d|" % (i, j) * 50
                    await aio.sock_sendall(s, msg)
                    got = b""
                    while len(got) < len(msg):
                        got += await aio.sock_recv(s, 4096)
                    assert got == msg

        acc = asyncio.ensure_future(acceptor())
        await asyncio.gather(*(client(i) for i in range(64)))
        await acc
        ls.close()

    run(main)


def test_receives_try_the_socket_first(run: Run) -> None:
    """Data already waiting is taken with one non-blocking recv, no ring operation; a
    socket where tries keep finding nothing goes to the ring directly (one try in
    eight) until a try finds data again; a socket with a timeout is never tried (recv
    would wait out the timeout). Every byte arrives either way."""
    from uringkit.aio._backend import RingBackend, get_backend

    async def main() -> None:
        a, b = socket.socketpair()
        a.setblocking(False)
        b.setblocking(False)
        be = get_backend()
        ring = isinstance(be, RingBackend)
        with a, b:
            a.send(b"ready")
            ud = be.next_ud if ring else 0
            assert await aio.sock_recv(b, 100) == b"ready"
            a.send(b"into")
            buf = bytearray(10)
            assert await aio.sock_recv_into(b, buf) == 4 and buf[:4] == b"into"
            if ring:
                assert be.next_ud == ud  # no operation went to the ring
            # nothing waiting: the tries miss, the ring receives
            for i in range(4):
                asyncio.get_running_loop().call_later(0.01, a.send, b"%d" % i)
                assert await aio.sock_recv(b, 100) == b"%d" % i
            if ring:
                assert be.recv_misses[b.fileno()] >= 2
                ud = be.next_ud
                a.send(b"x")  # waiting, but this socket is not tried now: the ring
                assert await aio.sock_recv(b, 100) == b"x"
                assert be.next_ud == ud + 1
                for _ in range(8):  # ... until the one try in eight finds data
                    a.send(b"y")
                    assert await aio.sock_recv(b, 100) == b"y"
                assert b.fileno() not in be.recv_misses
            b.settimeout(5.0)  # (a socket with a timeout: never tried)
            a.send(b"t")
            ud = be.next_ud if ring else 0
            assert await aio.sock_recv(b, 100) == b"t"
            if ring:
                assert be.next_ud == ud + 1

    run(main)


def test_datagrams_recvfrom_and_sendto(run: Run, tmp_path: Any) -> None:
    """aio.sock_sendto / sock_recvfrom / sock_recvfrom_into: UDP by address and by host
    name, truncation, receives that wait on the ring, AF_UNIX senders named as the
    socket module names them (a path as str, unnamed as None)."""

    async def main() -> None:
        with udp_pair() as (a, b):
            port = a.getsockname()[1]
            try:
                assert await aio.sock_sendto(b, b"by name", ("localhost", port)) == 7
            except NotImplementedError:
                pytest.skip("this loop has no sock_sendto (the thread engine uses it)")
            assert await aio.sock_recvfrom(a, 100) == (b"by name", b.getsockname())
            await aio.sock_sendto(b, memoryview(b"y" * 50), a.getsockname())
            assert await aio.sock_recvfrom(a, 20) == (b"y" * 20, b.getsockname())
            for i in range(4):  # nothing waiting: receives through the ring
                asyncio.get_running_loop().call_later(0.01, b.sendto, b"%d" % i, a.getsockname())
                buf = bytearray(8)
                assert await aio.sock_recvfrom_into(a, buf) == (1, b.getsockname())
                assert buf[:1] == b"%d" % i
            with pytest.raises(ValueError, match="greater than"):
                await aio.sock_recvfrom_into(a, bytearray(4), 10)
        path = str(tmp_path / "u")
        u = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        named = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        anon = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        with u, named, anon:
            u.bind(path)
            u.setblocking(False)
            named.bind(str(tmp_path / "n"))
            loop = asyncio.get_running_loop()
            loop.call_later(0.01, named.sendto, b"from n", path)
            assert await aio.sock_recvfrom(u, 100) == (b"from n", str(tmp_path / "n"))
            loop.call_later(0.01, anon.sendto, b"anon", path)
            data, addr = await aio.sock_recvfrom(u, 100)
            assert data == b"anon" and not addr

    run(main)
