"""uringkit.loop: asyncio's behaviour, written once and run on asyncio's loop, uvloop and
uringkit.loop (uvloop's test style), with real pipes, sockets, processes and signals."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from typing import Any

import pytest

from .conftest import Run
from conftest import PROBED, connected_pair, read_in_flight, resumed_in_another_thread


def test_streams_echo_large_and_small(run: Run) -> None:
    async def main() -> None:
        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter) -> None:
            while data := await r.read(65536):
                w.write(data)
                await w.drain()
            w.close()

        srv = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)
        for n in (1, 70_000, 4_000_000):  # the last fills socket buffers: writers wait
            msg = os.urandom(n)
            w.write(msg)
            assert await r.readexactly(n) == msg
        w.close()
        await w.wait_closed()
        srv.close()
        await srv.wait_closed()

    run(main)


def test_readiness_is_level_triggered(run: Run) -> None:
    """A reader that takes 1 byte per callback is called again while data remains (no
    new data arrives after the first write): epoll's level-triggered semantics."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        rfd, wfd = os.pipe()
        os.set_blocking(rfd, False)
        got = bytearray()
        done = loop.create_future()

        def on_readable() -> None:
            got.extend(os.read(rfd, 1))
            if len(got) == 10:
                loop.remove_reader(rfd)
                done.set_result(None)

        loop.add_reader(rfd, on_readable)
        os.write(wfd, b"0123456789")
        await asyncio.wait_for(done, 5)
        assert bytes(got) == b"0123456789"
        os.close(rfd)
        os.close(wfd)

    run(main)


def test_writer_callbacks_and_removal(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        a, b = socket.socketpair()
        a.setblocking(False)
        calls = 0
        fired = loop.create_future()

        def on_writable() -> None:
            nonlocal calls
            calls += 1
            loop.remove_writer(a)
            fired.set_result(None)

        loop.add_writer(a, on_writable)
        await asyncio.wait_for(fired, 5)
        await asyncio.sleep(0.05)
        assert calls == 1  # removed: not called again although still writable
        assert not loop.remove_writer(a)  # (False; uvloop: None)
        a.close()
        b.close()

    run(main)


def test_timers_fire_in_order(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        order: list[int] = []
        for i, d in enumerate([0.03, 0.01, 0.02, 0.0]):
            loop.call_later(d, order.append, i)
        await asyncio.sleep(0.1)  # (uvloop's timers have 1 ms resolution)
        assert order == [3, 1, 2, 0]

    run(main)


def test_wakeups_from_other_threads(run: Run) -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        futs = [loop.create_future() for _ in range(50)]

        def poke() -> None:
            for i, f in enumerate(futs):
                loop.call_soon_threadsafe(f.set_result, i)
                time.sleep(0.001)

        threading.Thread(target=poke).start()
        assert await asyncio.wait_for(asyncio.gather(*futs), 10) == list(range(50))
        assert await loop.run_in_executor(None, sum, [1, 2, 3]) == 6

    run(main)


def test_subprocess_and_signals(run: Run) -> None:
    async def main() -> None:
        p = await asyncio.create_subprocess_exec(
            sys.executable, "-c", "import sys; sys.stdout.write(sys.stdin.read().upper())",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        out, _ = await p.communicate(b"hello")
        assert out == b"HELLO" and p.returncode == 0
        loop = asyncio.get_running_loop()
        got = loop.create_future()
        loop.add_signal_handler(signal.SIGUSR1, got.set_result, "usr1")
        os.kill(os.getpid(), signal.SIGUSR1)
        assert await asyncio.wait_for(got, 5) == "usr1"
        loop.remove_signal_handler(signal.SIGUSR1)

    run(main)


@pytest.mark.parametrize("api", ["loop", "aio"])
def test_sock_calls_and_cancellation(run: Run, api: str) -> None:
    """accept/connect/recv/sendall, and a cancelled recv leaves the socket usable — with
    the loop's sock_* and with uringkit.aio's (through the loop's ring; on uringkit.loop
    the loop's sock_* are those)."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        from uringkit import aio

        io: Any = aio if api == "aio" else loop
        async with connected_pair(io) as (ls, cl, conn):
            pending = asyncio.ensure_future(io.sock_recv(cl, 10))
            await asyncio.sleep(0.05)  # the recv is waiting (in the kernel, for aio)
            if type(loop).__name__ == "UringEventLoop":
                # uringkit.loop's own sock_* submit the operation too (on the loop's
                # uringkit.aio ring), instead of a readiness poll and then recv
                from uringkit.aio._backend import _backends

                assert _backends[loop].ring.in_flight >= 1
            pending.cancel()
            with pytest.raises(asyncio.CancelledError):
                await pending
            await io.sock_sendall(conn, b"ping")
            assert await io.sock_recv(cl, 10) == b"ping"

    run(main)


def test_closing_with_registered_fds(run: Run) -> None:
    """A loop closed while readers are still registered releases everything."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        fds = [os.pipe() for _ in range(20)]
        for r, _ in fds:
            loop.add_reader(r, lambda: None)
        await asyncio.sleep(0.01)
        for r, w in fds:
            loop.remove_reader(r)
            os.close(r)
            os.close(w)

    for _ in range(3):
        run(main)


BLOCKED = """
from uringkit.testing import block_io_uring
block_io_uring()
import uringkit.loop
async def main():
    return 1
try:
    uringkit.loop.run(main())
except PermissionError as e:
    print("PermissionError", e)
"""


def test_blocked_io_uring_says_so() -> None:
    out = subprocess.run([sys.executable, "-c", BLOCKED], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("PermissionError") and "uringkit.loop needs io_uring" in out.stdout


def test_thousands_of_readers_at_once(run: Run) -> None:
    """More registrations in one iteration than the ring's SQ holds (1,024), all ready
    at once: nothing is dropped."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        pipes = [os.pipe() for _ in range(1500)]
        hits: list[int] = []
        done = loop.create_future()

        def on_readable(r: int) -> None:
            os.read(r, 1)
            loop.remove_reader(r)
            hits.append(r)
            if len(hits) == len(pipes):
                done.set_result(None)

        for r, _ in pipes:
            loop.add_reader(r, on_readable, r)
        for _, w in pipes:
            os.write(w, b"x")
        await asyncio.wait_for(done, 20)
        assert sorted(hits) == sorted(r for r, _ in pipes)
        for r, w in pipes:
            os.close(r)
            os.close(w)

    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft < 3200:
        if hard != resource.RLIM_INFINITY and hard < 3200:
            pytest.skip(f"RLIMIT_NOFILE {hard} < 3200")
        resource.setrlimit(resource.RLIMIT_NOFILE, (3200, hard))
    try:
        run(main)
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_loop_run_from_several_threads() -> None:
    """Created in one thread, run in another, then in the first and a third: asyncio
    allows it (one thread at a time); the ring follows the running thread."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    import uringkit.loop

    loop = uringkit.loop.new_event_loop()
    out: list[Any] = []

    async def job() -> str:
        r, w = os.pipe()
        fut = asyncio.get_running_loop().create_future()
        asyncio.get_running_loop().add_reader(r, lambda: fut.set_result(os.read(r, 5)))
        os.write(w, b"hello")
        got = await asyncio.wait_for(fut, 5)
        asyncio.get_running_loop().remove_reader(r)
        os.close(r)
        os.close(w)
        return got.decode()

    def runner() -> None:
        try:
            out.append(loop.run_until_complete(job()))
        except Exception as e:  # noqa: BLE001 - reported by the assertion below
            out.append(repr(e))

    for where in ("thread", "main", "thread"):
        if where == "main":
            runner()
        else:
            t = threading.Thread(target=runner)
            t.start()
            t.join()
    loop.close()
    assert out == ["hello"] * 3


def test_a_failing_completion_handler_loses_no_other_completion() -> None:
    """The ring's completions of one iteration run in one callback: a handler that
    raises goes to the loop's exception handler, and the handlers after it still run
    (each is a transport waiting for a completion the ring already handed over)."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    import uringkit.loop

    loop = uringkit.loop.new_event_loop()
    seen: list[Any] = []
    errors: list[dict[str, Any]] = []
    loop.set_exception_handler(lambda _loop, ctx: errors.append(ctx))

    def bad(c: Any) -> None:
        raise ValueError(f"handler bug ({c.res})")

    async def main() -> None:
        sel = asyncio.get_running_loop()._selector  # type: ignore[attr-defined]
        for h in (seen.append, bad, seen.append, seen.append):
            sel.ring.nop(user_data=sel.new_op(h))
        for _ in range(50):
            await asyncio.sleep(0)
            if len(seen) == 3:
                break

    try:
        loop.run_until_complete(main())
    finally:
        loop.close()
    assert [c.res for c in seen] == [0, 0, 0]
    assert len(errors) == 1
    assert isinstance(errors[0]["exception"], ValueError)
    assert "completion handler" in errors[0]["message"]


def _io_uring_fds() -> int:
    """io_uring instances this process has open."""
    n = 0
    for fd in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # (closed meanwhile)
            n += os.readlink(f"/proc/self/fd/{fd}") == "anon_inode:[io_uring]"
    return n


@pytest.mark.parametrize("shared", [True, False, "plain"])
def test_uringkit_aio_shares_the_loops_ring(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch, shared: bool | str
) -> None:
    """On uringkit.loop, uringkit.aio's files and sockets go through the loop's own
    ring (one io_uring for the loop, no eventfd): file reads, socket echoes on
    transports and aio.sock_*, cancellation and timers together, every result exact.
    `URINGKIT_AIO_SHARED_RING=0`: a ring of its own, as on any other loop. "plain": the
    loop's ring set up as on kernels before 6.1 (no SINGLE_ISSUER/DEFER_TASKRUN: a
    ring any thread may submit to), shared the same way."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    import uringkit.loop
    from uringkit import Ring, aio
    from uringkit.aio import _backend

    if shared == "plain":

        def plain_ring(self: Any) -> tuple[Any, bool]:
            self.single_issuer = False
            return Ring(self._entries), True

        monkeypatch.setattr(uringkit.loop.UringSelector, "_new_ring", plain_ring)
        shared = True

    monkeypatch.setenv("URINGKIT_ENGINE", "io_uring")
    monkeypatch.setattr(_backend, "SHARED_RING", shared)
    data = os.urandom(1 << 20)
    (tmp_path / "f").write_bytes(data)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    before = _io_uring_fds()

    class Echo(asyncio.Protocol):
        def connection_made(self, t: Any) -> None:
            self.t = t

        def data_received(self, d: bytes) -> None:
            self.t.write(d)

    async def main() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        srv = await loop.create_server(Echo, "127.0.0.1", 0)
        port = srv.sockets[0].getsockname()[1]
        r, w = await asyncio.open_connection("127.0.0.1", port)

        async def echo() -> bool:
            for i in range(200):
                msg = bytes([i]) * (1 + i * 37)
                w.write(msg)
                if await r.readexactly(len(msg)) != msg:
                    return False
            return True

        async def reads() -> bool:
            async with aio.open(tmp_path / "f", "rb") as f:
                for off in range(0, len(data), 65536):
                    if await f.read_at(4096, off) != data[off : off + 4096]:
                        return False
            return True

        async def socks() -> bool:
            a, b = socket.socketpair()
            with a, b:
                for i in range(100):
                    await aio.sock_sendall(a, b"%d" % i)
                    if await aio.sock_recv(b, 16) != b"%d" % i:
                        return False
            return True

        # a read that never completes, cancelled: the ring cancels it in the kernel
        fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
        g = await aio.open(fd, "rb", closefd=False)
        stuck = asyncio.ensure_future(g.read(4))
        await asyncio.sleep(0.01)
        ok = await asyncio.gather(echo(), reads(), socks(), asyncio.sleep(0.02, True))
        stuck.cancel()
        with pytest.raises(asyncio.CancelledError):
            await stuck
        os.write(fd, b"late")
        late = os.read(fd, 4)  # (the cancelled read took nothing)
        os.close(fd)
        b = _backend.get_backend()
        out = {
            "ok": ok,
            "late": late,
            "shared": b.shared,
            "same_ring": b.ring is loop._selector.ring,  # type: ignore[attr-defined]
            "efd": b.efd,
            "rings": _io_uring_fds() - before,
        }
        w.close()
        srv.close()
        return out

    got = uringkit.loop.run(main())
    assert got["ok"] == [True] * 4 and got["late"] == b"late"
    if shared:
        assert got["shared"] and got["same_ring"] and got["efd"] == -1
        assert got["rings"] == 1
    else:
        assert not got["shared"] and not got["same_ring"] and got["efd"] >= 0
        assert got["rings"] == 2


def test_shared_ring_io_in_flight_when_the_loop_moves_threads(tmp_path: Any) -> None:
    """A loop stopped with a uringkit.aio read in flight on its ring, then run from
    another thread: the read's awaiter gets a RuntimeError saying why (the old ring
    cannot be driven from there); new I/O works on the new ring."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    import uringkit.loop

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)
    (tmp_path / "f").write_bytes(b"hello world")
    loop = uringkit.loop.new_event_loop()

    stuck = loop.run_until_complete(read_in_flight(fd))
    out = resumed_in_another_thread(loop, stuck, tmp_path / "f")
    os.close(fd)
    assert len(out) == 2 and "moved to another thread" in out[0]
    assert out[1] == b"hello world"
