"""Stream transports: asyncio's behaviour, written once and run on every loop of the `run`
fixture — on uringkit.loop these are `RingSocketTransport`s, whose receives complete on
the ring (multishot RECV into provided buffers) — with real TCP and Unix sockets."""

from __future__ import annotations

import asyncio
import os
import socket
import ssl
import struct
import subprocess
import threading
from pathlib import Path
from typing import Any

import pytest

from .conftest import Run
from conftest import PROBED


def _check_kind(run: Run, transport: asyncio.BaseTransport) -> None:
    """On uringkit.loop, the transport under test is the ring's."""
    name = type(transport).__name__
    if run.kind in ("uringkit", "uringkit-ring-sends"):  # type: ignore[attr-defined]
        assert name == "RingSocketTransport"
    elif run.kind == "uringkit-selector":  # type: ignore[attr-defined]
        assert name == "_SelectorSocketTransport"


class Collect(asyncio.Protocol):
    """Records what happens to it; `done` resolves at connection_lost."""

    def __init__(self, keep_open_on_eof: bool = False) -> None:
        self.data = bytearray()
        self.events: list[str] = []
        self.keep_open = keep_open_on_eof
        self.transport: Any = None
        self.done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self.got = asyncio.Event()

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.events.append("made")

    def data_received(self, data: bytes) -> None:
        self.data += data
        self.got.set()

    def eof_received(self) -> bool:
        self.events.append("eof")
        return self.keep_open

    def pause_writing(self) -> None:
        self.events.append("pause_writing")

    def resume_writing(self) -> None:
        self.events.append("resume_writing")

    def connection_lost(self, exc: BaseException | None) -> None:
        self.events.append("lost")
        self.done.set_result(exc)

    async def until(self, n: int) -> bytes:
        while len(self.data) < n:
            self.got.clear()
            await asyncio.wait_for(self.got.wait(), 10)
        return bytes(self.data)


async def _pair(
    server_proto: Any = Collect, client_proto: Any = Collect
) -> tuple[Any, Any, asyncio.Server]:
    """A connected (server protocol, client protocol) over TCP on 127.0.0.1."""
    loop = asyncio.get_running_loop()
    made: asyncio.Future[Any] = loop.create_future()

    def factory() -> Any:
        p = server_proto()
        made.set_result(p)
        return p

    srv = await loop.create_server(factory, "127.0.0.1", 0)
    port = srv.sockets[0].getsockname()[1]
    _, client = await loop.create_connection(client_proto, "127.0.0.1", port)
    server = await asyncio.wait_for(made, 5)
    return server, client, srv


async def _close(*things: Any) -> None:
    """Close the protocols' transports, wait for their connection_lost, then close the
    servers (uvloop's `wait_closed` waits for the connections a server accepted; its
    Server is no asyncio.Server)."""
    servers = [t for t in things if hasattr(t, "wait_closed")]
    things = tuple(t for t in things if t not in servers)
    for t in things:
        if t.transport is not None and not t.transport.is_closing():
            t.transport.close()
    for t in things:
        await asyncio.wait_for(t.done, 5)
    for srv in servers:
        srv.close()
        await asyncio.wait_for(srv.wait_closed(), 5)


def _without_flow(events: list[str]) -> list[str]:
    """The events but pause_writing/resume_writing, which must come in pairs: a write
    above the high-water mark may pause the writer until the kernel has it (on the ring,
    until its SEND completes), but never leaves it paused."""
    flow = [e for e in events if e.endswith("_writing")]
    assert flow == ["pause_writing", "resume_writing"] * (len(flow) // 2)
    return [e for e in events if not e.endswith("_writing")]


def test_echo_in_many_sizes(run: Run) -> None:
    """Messages from 1 byte to 3 MiB (many provided buffers each) come back intact."""

    class Echo(Collect):
        def data_received(self, data: bytes) -> None:
            self.transport.write(data)

    async def main() -> None:
        server, client, srv = await _pair(Echo)
        _check_kind(run, client.transport)
        _check_kind(run, server.transport)
        sent = bytearray()
        for n in (1, 100, 16 << 10, (16 << 10) + 1, 200_000, 3 << 20):
            msg = os.urandom(n)
            client.transport.write(msg)
            sent += msg
            assert await client.until(len(sent)) == sent
        assert client.transport.get_extra_info("peername")[1] == srv.sockets[0].getsockname()[1]
        assert isinstance(client.transport.get_extra_info("socket").fileno(), int)
        await _close(client, server, srv)
        assert _without_flow(client.events) == ["made", "lost"]
        assert client.done.result() is None

    run(main)


def test_many_connections_echo_at_once(run: Run) -> None:
    """64 connections echoing at once (on uringkit.loop a loop this busy sends through
    the ring, batched): every connection gets exactly its own bytes back, in order."""

    async def main() -> None:
        loop = asyncio.get_running_loop()

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(65536):
                w.write(data)
            w.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]

        async def client(i: int) -> None:
            r, w = await asyncio.open_connection("127.0.0.1", port)
            for j in range(40):
                msg = struct.pack("!II", i, j) * (1 + (i * 7 + j) % 700)
                w.write(msg)
                assert await r.readexactly(len(msg)) == msg
            w.close()
            await w.wait_closed()

        await asyncio.wait_for(asyncio.gather(*(client(i) for i in range(64))), 60)
        srv.close()
        await srv.wait_closed()
        assert loop.is_running()

    run(main)


def test_more_data_at_once_than_the_loops_receive_buffers(
    run: Run, monkeypatch: pytest.MonkeyPatch
) -> None:
    """300 connections whose 40 KiB each arrive at once: far more than the provided
    buffers uringkit.loop's connections share (cut to 8 here, so that they surely run
    dry: the kernel hands a loop's deferred receives over 20 at a time, and 256 buffers
    are recycled faster than that). A receive that finds them all taken (ENOBUFS) is
    re-armed and its data waits in the socket: every byte comes through, in order, on
    every connection."""
    import uringkit.loop

    monkeypatch.setattr(uringkit.loop, "RECV_BUFFERS", 8)
    n, size = 300, 40 << 10

    async def main() -> None:
        got: dict[int, bytearray] = {}
        done, all_lost = asyncio.Event(), asyncio.Event()
        lost: list[BaseException | None] = []

        class Sink(asyncio.Protocol):
            def connection_made(self, transport: asyncio.BaseTransport) -> None:
                self.buf = bytearray()

            def connection_lost(self, exc: BaseException | None) -> None:
                lost.append(exc)
                if len(lost) == n:
                    all_lost.set()

            def data_received(self, data: bytes) -> None:
                self.buf += data
                if len(self.buf) >= size:
                    got[struct.unpack("!I", self.buf[:4])[0]] = self.buf
                    if len(got) == n:
                        done.set()

        loop = asyncio.get_running_loop()
        srv = await loop.create_server(Sink, "127.0.0.1", 0, backlog=n)
        port = srv.sockets[0].getsockname()[1]
        clients = [socket.create_connection(("127.0.0.1", port)) for _ in range(n)]
        try:
            await asyncio.sleep(0.2)  # (all accepted, their receives armed)
            # every client's data sent before the loop runs again
            msgs = [struct.pack("!I", i) + os.urandom(size - 4) for i in range(n)]
            for c, m in zip(clients, msgs, strict=True):
                c.sendall(m)
            await asyncio.wait_for(done.wait(), 30)
            assert all(bytes(got[i]) == msgs[i] for i in range(n))
        finally:
            for c in clients:
                c.close()  # (each server transport sees EOF and closes)
            await asyncio.wait_for(all_lost.wait(), 30)
            srv.close()
            await srv.wait_closed()
        assert lost == [None] * n

    run(main)


def test_pause_reading_holds_data_until_resumed(run: Run) -> None:
    """No data_received between pause_reading and resume_reading; afterwards every byte,
    in order, and the transport says whether it is reading."""

    async def main() -> None:
        server, client, srv = await _pair()
        server.transport.pause_reading()
        assert not server.transport.is_reading()
        msg = os.urandom(300_000)
        client.transport.write(msg)
        await asyncio.sleep(0.1)
        assert len(server.data) == 0
        server.transport.resume_reading()
        assert server.transport.is_reading()
        assert await server.until(len(msg)) == msg
        for _ in range(3):  # paused and resumed with nothing in between
            server.transport.pause_reading()
            server.transport.resume_reading()
        client.transport.write(b"after")
        assert await server.until(len(msg) + 5) == msg + b"after"
        await _close(client, server, srv)

    run(main)


def test_flow_control_pauses_and_resumes_the_writer(run: Run) -> None:
    """A peer that does not read makes the writer's buffer pass the high-water mark:
    pause_writing; once the peer reads, resume_writing, and every byte arrives."""

    async def main() -> None:
        server, client, srv = await _pair()
        client.transport.pause_reading()
        server.transport.set_write_buffer_limits(high=64 << 10)
        msg = os.urandom(16 << 20)
        for i in range(0, len(msg), 1 << 20):
            server.transport.write(msg[i : i + (1 << 20)])
        await asyncio.sleep(0.05)
        assert "pause_writing" in server.events
        assert server.transport.get_write_buffer_size() > 0
        client.transport.resume_reading()
        assert await client.until(len(msg)) == msg
        for _ in range(100):
            if "resume_writing" in server.events:
                break
            await asyncio.sleep(0.01)
        assert server.events.count("pause_writing") == server.events.count("resume_writing")
        assert server.transport.get_write_buffer_size() == 0
        await _close(client, server, srv)

    run(main)


def test_write_eof_and_a_half_closed_connection(run: Run) -> None:
    """write_eof after queued data: the peer gets all of it, then EOF; a protocol whose
    eof_received returns True can still write back, then close."""

    async def main() -> None:
        server, client, srv = await _pair(lambda: Collect(keep_open_on_eof=True))
        msg = os.urandom(2 << 20)
        client.transport.write(msg)
        client.transport.write_eof()
        assert client.transport.can_write_eof()
        with pytest.raises(RuntimeError, match="write_eof"):
            client.transport.write(b"more")
        assert await server.until(len(msg)) == msg
        for _ in range(100):
            if "eof" in server.events:
                break
            await asyncio.sleep(0.01)
        assert server.events == ["made", "eof"]
        server.transport.write(b"reply")
        server.transport.close()
        assert await client.until(5) == b"reply"
        assert await asyncio.wait_for(client.done, 5) is None
        assert _without_flow(client.events) == ["made", "eof", "lost"]
        await _close(srv)
        assert await asyncio.wait_for(server.done, 5) is None

    run(main)


def test_close_sends_what_is_queued_first(run: Run) -> None:
    async def main() -> None:
        server, client, srv = await _pair()
        client.transport.pause_reading()
        msg = os.urandom(8 << 20)
        server.transport.write(msg)
        server.transport.close()
        assert server.transport.is_closing()
        server.transport.close()  # (twice: nothing more)
        await asyncio.sleep(0.05)
        assert not server.done.done()  # still sending
        client.transport.resume_reading()
        assert await client.until(len(msg)) == msg
        assert await asyncio.wait_for(server.done, 5) is None
        assert await asyncio.wait_for(client.done, 5) is None
        assert _without_flow(client.events) == ["made", "eof", "lost"]
        await _close(srv)

    run(main)


def test_abort_drops_queued_data_and_the_peer_sees_the_end(run: Run) -> None:
    async def main() -> None:
        server, client, srv = await _pair()
        client.transport.pause_reading()
        server.transport.write(os.urandom(16 << 20))
        server.transport.abort()
        assert await asyncio.wait_for(server.done, 5) is None
        assert server.transport.get_write_buffer_size() == 0
        client.transport.resume_reading()
        await asyncio.wait_for(client.done, 10)  # EOF or a reset, not a hang
        assert len(client.data) < 16 << 20
        await _close(srv)

    run(main)


def test_a_reset_by_the_peer_is_connection_lost_with_the_error(run: Run) -> None:
    async def main() -> None:
        server, client, srv = await _pair()
        sock = client.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        client.transport.abort()  # close with SO_LINGER 0: an RST
        exc = await asyncio.wait_for(server.done, 5)
        assert exc is None or isinstance(exc, ConnectionResetError)
        if run.kind != "uvloop":  # type: ignore[attr-defined]
            assert isinstance(exc, ConnectionResetError)
        await _close(srv)

    run(main)


def test_buffered_protocol_with_tiny_buffers(run: Run) -> None:
    """A BufferedProtocol whose get_buffer hands out 7 bytes at a time gets every byte."""

    class Tiny(asyncio.BufferedProtocol):
        def __init__(self) -> None:
            self.buf = bytearray(7)
            self.data = bytearray()
            self.done = asyncio.get_running_loop().create_future()
            self.transport: Any = None

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = transport

        def get_buffer(self, sizehint: int) -> bytearray:
            return self.buf

        def buffer_updated(self, nbytes: int) -> None:
            self.data += self.buf[:nbytes]

        def eof_received(self) -> bool:
            return False

        def connection_lost(self, exc: BaseException | None) -> None:
            self.done.set_result(exc)

    async def main() -> None:
        server, client, srv = await _pair(Tiny)
        msg = os.urandom(100_000)
        client.transport.write(msg)
        client.transport.write_eof()
        assert await asyncio.wait_for(server.done, 10) is None
        assert bytes(server.data) == msg
        await _close(client, srv)

    run(main)


def test_a_failing_protocol_callback_goes_to_the_exception_handler(run: Run) -> None:
    class Broken(Collect):
        def data_received(self, data: bytes) -> None:
            raise ValueError("boom")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        seen: list[dict[str, Any]] = []
        loop.set_exception_handler(lambda _loop, ctx: seen.append(ctx))
        server, client, srv = await _pair(Broken)
        client.transport.write(b"x")
        exc = await asyncio.wait_for(server.done, 5)
        assert isinstance(exc, ValueError)
        assert isinstance(seen[0]["exception"], ValueError)
        if run.kind != "uvloop":  # type: ignore[attr-defined]
            assert "data_received" in seen[0]["message"]  # (uvloop's message is its own)
        await asyncio.wait_for(client.done, 5)
        await _close(srv)

    run(main)


def test_streams_over_a_unix_socket(run: Run, tmp_path: Path) -> None:
    async def main() -> None:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            _check_kind(run, w.transport)
            while line := await r.readline():
                w.write(line.upper())
            w.close()

        path = str(tmp_path / "s")
        srv = await asyncio.start_unix_server(handle, path)
        r, w = await asyncio.open_unix_connection(path)
        for i in range(200):
            w.write(b"line %d\n" % i)
        for i in range(200):
            assert await r.readline() == b"LINE %d\n" % i
        w.close()
        await w.wait_closed()
        srv.close()
        await srv.wait_closed()

    run(main)


def test_sendfile_and_the_socket_in_use(run: Run, tmp_path: Path) -> None:
    """loop.sendfile over the transport; the transport's socket cannot be used by
    loop.sock_recv meanwhile (asyncio's check)."""

    if run.kind == "uvloop":  # type: ignore[attr-defined]
        pytest.skip("uvloop has no loop.sendfile (NotImplementedError)")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server, client, srv = await _pair()
        f = tmp_path / "f"
        body = os.urandom(3 << 20)
        f.write_bytes(body)
        with f.open("rb") as fh:
            assert await loop.sendfile(server.transport, fh) == len(body)
        server.transport.write(b"tail")
        assert await client.until(len(body) + 4) == body + b"tail"
        if run.kind != "uvloop":  # type: ignore[attr-defined]
            with pytest.raises(RuntimeError, match="transport"):
                await loop.sock_recv(server.transport.get_extra_info("socket")._sock, 1)
        await _close(client, server, srv)

    run(main)


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory) -> tuple[str, str]:
    d = tmp_path_factory.mktemp("tls")
    key, cert = str(d / "key.pem"), str(d / "cert.pem")
    r = subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key]
        + ["-out", cert, "-days", "2", "-subj", "/CN=localhost"],
        capture_output=True,
    )
    if r.returncode != 0:
        pytest.skip(f"openssl could not make a certificate: {r.stderr[-200:]!r}")
    return key, cert


def test_tls_streams_and_start_tls(run: Run, certs: tuple[str, str]) -> None:
    """TLS over the transport (asyncio's SSLProtocol is a BufferedProtocol): a TLS
    server, and a plain connection upgraded with start_tls."""
    key, cert = certs
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_ctx.load_cert_chain(cert, key)
    client_ctx = ssl.create_default_context(cafile=cert)

    async def main() -> None:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            line = await r.readline()
            if line == b"STARTTLS\n":
                w.write(b"GO\n")  # (the client starts its handshake only after this:
                await w.start_tls(server_ctx)  # bytes read before start_tls are not TLS's)
                line = await r.readline()
            w.write(line[:-1][::-1] + b"\n")
            await w.drain()
            w.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=None)
        port = srv.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        w.write(b"STARTTLS\n")
        assert await r.readline() == b"GO\n"
        await w.start_tls(client_ctx, server_hostname="localhost")
        payload = os.urandom(30_000).hex().encode() + b"\n"  # (under the 64 KiB line limit)
        w.write(payload)
        assert await r.readline() == payload[:-1][::-1] + b"\n"
        w.close()
        srv.close()
        await srv.wait_closed()

        tls = await asyncio.start_server(handle, "127.0.0.1", 0, ssl=server_ctx)
        port = tls.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection(
            "127.0.0.1", port, ssl=client_ctx, server_hostname="localhost"
        )
        w.write(b"hello over tls\n")
        assert await r.read() == b"slt revo olleh\n"
        w.close()
        await w.wait_closed()
        tls.close()
        await tls.wait_closed()

    run(main)


def test_a_loop_moved_to_another_thread_aborts_its_ring_connections() -> None:
    """A loop whose ring moves to another thread (SINGLE_ISSUER: the old ring cannot be
    driven from there) cannot follow the receives in flight on the old ring: its ring
    transports are closed with ConnectionAbortedError saying why, not left hanging."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    import uringkit.loop

    loop = uringkit.loop.new_event_loop()
    if not loop._ring_io:
        loop.close()
        pytest.skip("no ring transports on this kernel")
    box: dict[str, Any] = {}

    async def connect() -> None:
        box["server"], box["client"], box["srv"] = await _pair()

    loop.run_until_complete(connect())
    sel = loop._selector

    async def after() -> Any:
        client = box["client"]
        exc = await asyncio.wait_for(client.done, 5)
        await _close(box["server"], box["srv"])
        return exc

    out: list[Any] = []
    t = threading.Thread(target=lambda: out.append(loop.run_until_complete(after())))
    # the old ring, closed from a thread not its issuer, keeps (leaks) the buffer ring
    # its receives may still write into, and says so
    with pytest.warns(ResourceWarning, match="SINGLE_ISSUER"):
        t.start()
        t.join()
    loop.close()
    if not sel._ring_moved:  # (a kernel without SINGLE_ISSUER: no move)
        pytest.skip("the ring did not move")
    assert isinstance(out[0], ConnectionAbortedError) and "thread" in str(out[0])


def test_a_burst_already_received_is_one_data_received(run: Run) -> None:
    """What arrived while the loop was busy comes in one data_received, as asyncio's
    one recv of up to 256 KiB gives it: on uringkit.loop the burst fills several
    provided buffers (16 KiB each) in one io_uring_enter, and they are handed over as
    one bytes — not one call per buffer. Bytes intact and in order on every loop."""

    class Sizes(asyncio.Protocol):
        def __init__(self) -> None:
            self.sizes: list[int] = []
            self.data = bytearray()
            self.got = asyncio.Event()
            self.transport: Any = None

        def connection_made(self, transport: Any) -> None:
            self.transport = transport

        def data_received(self, data: bytes) -> None:
            self.sizes.append(len(data))
            self.data += data
            self.got.set()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        proto = Sizes()
        srv = await loop.create_server(lambda: proto, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        with socket.create_connection(("127.0.0.1", port)) as c:
            while proto.transport is None:
                await asyncio.sleep(0.001)
            _check_kind(run, proto.transport)
            await asyncio.sleep(0.01)  # (its receive is armed)
            msg = os.urandom(60_000)
            c.sendall(msg)
            import time

            time.sleep(0.05)  # the loop busy: the whole burst waits in the socket
            while len(proto.data) < len(msg):
                proto.got.clear()
                await asyncio.wait_for(proto.got.wait(), 5)
            assert bytes(proto.data) == msg
            if run.kind in ("uringkit", "uringkit-ring-sends"):  # type: ignore[attr-defined]
                assert proto.sizes == [60_000]  # (four buffers, one call)
        proto.transport.close()
        srv.close()
        await srv.wait_closed()

    run(main)
