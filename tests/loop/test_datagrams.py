"""Datagram endpoints (`loop.create_datagram_endpoint`) and `loop.sock_recvfrom` /
`sock_sendto`: each behaviour written once and run on asyncio's loop, uvloop and
uringkit.loop (whose datagram transports receive through the ring), on real UDP and
AF_UNIX datagram sockets."""

from __future__ import annotations

import asyncio
import os
import socket
from pathlib import Path
from typing import Any

import pytest

from .conftest import Run
from conftest import udp_pair


class Recorder(asyncio.DatagramProtocol):
    """Records what the transport hands over, in order."""

    def __init__(self) -> None:
        self.got: list[tuple[bytes, Any]] = []
        self.errors: list[Exception] = []
        self.lost: list[Exception | None] = []
        self.transport: Any = None
        self.changed = asyncio.Event()

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.got.append((data, addr))
        self.changed.set()

    def error_received(self, exc: Exception) -> None:
        self.errors.append(exc)
        self.changed.set()

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost.append(exc)
        self.changed.set()

    async def wait_for(self, n: int, timeout: float = 5.0) -> None:
        async def until() -> None:
            while len(self.got) + len(self.errors) < n:
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(until(), timeout)


class Echo(asyncio.DatagramProtocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def datagram_received(self, data: bytes, addr: Any) -> None:
        self.transport.sendto(data, addr)


async def recorder(sock: socket.socket | None = None) -> tuple[Any, Recorder, Any]:
    """A Recorder endpoint on `sock` (or a new UDP socket on 127.0.0.1) that has
    started reading: (transport, protocol, its address)."""
    loop = asyncio.get_running_loop()
    if sock is None:
        t, p = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
    else:
        t, p = await loop.create_datagram_endpoint(Recorder, sock=sock)
    await asyncio.sleep(0)  # (connection_made has run, reading has started)
    return t, p, t.get_extra_info("sockname")


def _big_rcvbuf_udp() -> socket.socket:
    """A UDP socket on 127.0.0.1 whose receive buffer holds a burst (1 MiB)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
    sock.bind(("127.0.0.1", 0))
    return sock


def test_udp_echo_with_sender_addresses(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        st, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        server = st.get_extra_info("sockname")
        ct, cp = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        if getattr(loop, "_ring_io", False):  # (uringkit.loop receives on the ring)
            assert type(ct).__name__ == "RingDatagramTransport"
        sizes = [1, 100, 1400, 9000, 65000]
        for i, n in enumerate(sizes):
            ct.sendto(bytes([i]) * n, server)
        await cp.wait_for(len(sizes))
        assert sorted(len(d) for d, _ in cp.got) == sizes  # (UDP may reorder)
        for d, addr in cp.got:
            assert d == bytes([d[0]]) * len(d) and addr == server
        ct.close()
        st.close()
        await asyncio.sleep(0)

    run(main)


def test_connected_endpoint_addresses_and_icmp_errors(run: Run) -> None:
    """A connected endpoint refuses another address (ValueError), and a port nobody
    listens on comes back as error_received(ConnectionRefusedError) — reading goes on."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        st, _ = await loop.create_datagram_endpoint(Echo, local_addr=("127.0.0.1", 0))
        server = st.get_extra_info("sockname")
        ct, cp = await loop.create_datagram_endpoint(Recorder, remote_addr=server)
        with pytest.raises(ValueError, match="Invalid address"):
            ct.sendto(b"x", ("127.0.0.1", 9))
        ct.sendto(b"one")
        await cp.wait_for(1)
        assert cp.got == [(b"one", server)]
        st.close()
        await asyncio.sleep(0.02)
        ct.sendto(b"nobody home")
        await cp.wait_for(2)
        assert isinstance(cp.errors[0], ConnectionRefusedError)
        st2, _ = await loop.create_datagram_endpoint(Echo, local_addr=server)
        ct.sendto(b"back")  # still reading after the error
        await cp.wait_for(3)
        assert cp.got[-1] == (b"back", server)
        ct.close()
        st2.close()
        await asyncio.sleep(0)

    run(main)


def test_pause_reading_holds_datagrams_until_resumed(run: Run) -> None:
    async def main() -> None:
        rt, rp, addr = await recorder()
        if not hasattr(rt, "pause_reading"):
            rt.close()
            pytest.skip("this loop's datagram transport cannot pause reading")
        rt.pause_reading()
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i in range(3):
                s.sendto(b"d%d" % i, addr)
            await asyncio.sleep(0.05)
            assert rp.got == []
            rt.resume_reading()
            await rp.wait_for(3)
            assert [d for d, _ in rp.got] == [b"d0", b"d1", b"d2"]
            assert rp.got[0][1] == ("127.0.0.1", s.getsockname()[1])
        rt.close()
        await asyncio.sleep(0)

    run(main)


def test_close_and_abort_end_the_endpoint_once(run: Run) -> None:
    async def main() -> None:
        for end in ("close", "abort"):
            t, p, addr = await recorder()
            getattr(t, end)()
            assert t.is_closing()
            getattr(t, end)()  # (twice: nothing more happens)
            await asyncio.sleep(0.02)
            assert p.lost == [None]
            with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
                s.sendto(b"late", addr)  # nobody reads it: no callback after the end
            await asyncio.sleep(0.02)
            assert p.got == []

    run(main)


def test_burst_of_datagrams_all_delivered(run: Run) -> None:
    async def main() -> None:
        rt, rp, addr = await recorder(_big_rcvbuf_udp())
        n = 100
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i in range(n):
                s.sendto(b"%05d" % i, addr)
            await rp.wait_for(n)
        assert sorted(d for d, _ in rp.got) == [b"%05d" % i for i in range(n)]
        rt.close()
        await asyncio.sleep(0)

    run(main)


def test_unix_datagrams_name_their_sender(run: Run, tmp_path: Path) -> None:
    """AF_UNIX datagram endpoints: the sender's address as the socket module gives it
    (a path as str, an unnamed sender as None), datagrams larger than 64 KiB."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        path = str(tmp_path / "srv")
        srv = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        srv.bind(path)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 1 << 20)
        rt, rp = await loop.create_datagram_endpoint(Recorder, sock=srv)
        await asyncio.sleep(0)
        big = os.urandom(150_000)
        with (
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as named,
            socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as unnamed,
        ):
            named.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 1 << 20)
            named.bind(str(tmp_path / "cli"))
            named.sendto(big, path)
            unnamed.sendto(b"anon", path)
            await rp.wait_for(2)
        assert rp.got[0] == (big, str(tmp_path / "cli"))
        assert rp.got[1][0] == b"anon" and not rp.got[1][1]  # (None; uvloop: "")
        rt.close()
        await asyncio.sleep(0)

    run(main)


def test_loop_sock_recvfrom_and_sendto(run: Run) -> None:
    """loop.sock_recvfrom / sock_recvfrom_into / sock_sendto: datagrams with their
    addresses, truncation of a longer datagram, a waiting receive cancelled without
    losing the next datagram."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        with udp_pair() as (a, b):
            try:
                n = await loop.sock_sendto(b, b"hello", a.getsockname())
            except NotImplementedError:
                pytest.skip("this loop has no sock_sendto")
            assert n == 5
            assert await loop.sock_recvfrom(a, 100) == (b"hello", b.getsockname())
            await loop.sock_sendto(b, b"x" * 100, a.getsockname())
            data, _ = await loop.sock_recvfrom(a, 10)
            assert data == b"x" * 10  # the rest of that datagram is gone
            # a receive that waits (nothing there yet), then gets its datagram
            later = loop.call_later(0.02, b.sendto, b"later", a.getsockname())
            buf = bytearray(64)
            got = await loop.sock_recvfrom_into(a, buf, 32)
            assert got == (5, b.getsockname()) and buf[:5] == b"later"
            later.cancel()
            # cancelled while waiting: the next datagram is not swallowed
            t = asyncio.ensure_future(loop.sock_recvfrom(a, 100))
            await asyncio.sleep(0.02)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            await asyncio.sleep(0.02)
            b.sendto(b"after", a.getsockname())
            got2 = await asyncio.wait_for(loop.sock_recvfrom(a, 100), 5)
            assert got2 == (b"after", b.getsockname())

    run(main)


def test_burst_beyond_the_shared_buffers(run: Run, monkeypatch: pytest.MonkeyPatch) -> None:
    """More datagrams at once than uringkit.loop's shared UDP buffers (cut to 2 here):
    the multishot receive ends with ENOBUFS, is re-armed, and every datagram arrives."""
    import uringkit.loop

    monkeypatch.setattr(uringkit.loop, "DATAGRAM_BUFFERS", 2)

    async def main() -> None:
        rt, rp, addr = await recorder(_big_rcvbuf_udp())
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for rnd in range(3):
                for i in range(40):
                    s.sendto(b"%d-%d" % (rnd, i) + b"." * 1000, addr)
                await rp.wait_for(40 * (rnd + 1))
        want = sorted(b"%d-%d" % (r, i) + b"." * 1000 for r in range(3) for i in range(40))
        assert sorted(d for d, _ in rp.got) == want
        rt.close()
        await asyncio.sleep(0)

    run(main)


def test_datagram_endpoint_follows_the_loop_to_another_thread() -> None:
    """uringkit.loop run from another thread moves to a new ring there: a datagram
    endpoint's receive, in flight on the old ring, is armed again on the new one (a
    datagram socket has no stream to lose), and datagrams keep arriving."""
    import threading
    import warnings

    from conftest import PROBED

    if not PROBED:
        pytest.skip("io_uring unavailable")
    import uringkit.loop

    loop = uringkit.loop.new_event_loop()

    async def start() -> tuple[Any, Recorder]:
        t, p = await loop.create_datagram_endpoint(Recorder, local_addr=("127.0.0.1", 0))
        await asyncio.sleep(0.01)
        return t, p

    t, p = loop.run_until_complete(start())
    addr = t.get_extra_info("sockname")

    async def more() -> None:
        with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
            for i in range(3):
                s.sendto(b"%d" % i, addr)
                await p.wait_for(i + 1)

    th = threading.Thread(target=loop.run_until_complete, args=(more(),))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)  # (the old ring's buffers)
        th.start()
        th.join(10)
        t.close()
        loop.run_until_complete(asyncio.sleep(0.01))
        loop.close()
    assert [d for d, _ in p.got] == [b"0", b"1", b"2"]
