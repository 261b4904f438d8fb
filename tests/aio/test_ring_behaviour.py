"""What only a real ring integration has to get right: batching, cancellation, loop close,
leaked fds, batched ranges, O_DIRECT."""

from __future__ import annotations

import asyncio
import errno
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from uringkit import aio
from uringkit.aio._backend import RingBackend, get_backend

from conftest import PROBED, direct_file, read_in_flight, resumed_in_another_thread


def nfds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_many_reads_share_one_submit(tmp_path: Path, run: Any, engine: str) -> None:
    p = tmp_path / "f"
    data = os.urandom(1 << 20)
    p.write_bytes(data)
    os.posix_fadvise(os.open(p, os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)

    async def go() -> Any:
        f = await aio.open(p, "rb")
        b = get_backend()
        before = b.ring.submit_calls if isinstance(b, RingBackend) else 0
        got = await asyncio.gather(*(f.read_at(4096, i * 4096) for i in range(64)))
        after = b.ring.submit_calls if isinstance(b, RingBackend) else 0
        await f.close()
        return got, after - before

    got, submits = run(go)
    assert got == [data[i * 4096 : (i + 1) * 4096] for i in range(64)]
    if engine == "io_uring":
        # batched: one submit per EARLY_SUBMIT reads queued in the same iteration (the
        # first ones reach the disk while the loop still queues the rest), not 64
        from uringkit.aio._backend import EARLY_SUBMIT

        assert submits <= 64 // EARLY_SUBMIT + 2, f"{submits} submits for 64 reads"


def test_cancel_read_keeps_loop_healthy(tmp_path: Path, ring_run: Any) -> None:
    """Only a ring can take back a read that is waiting for data: a read blocked in a pool
    thread keeps running after its task is cancelled and eats the next data."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    async def go() -> Any:
        f = await aio.open(os.open(fifo, os.O_RDWR), "rb", closefd=True)
        t = asyncio.ensure_future(f.read(10))
        await asyncio.sleep(0.05)
        t.cancel()
        with pytest.raises(asyncio.CancelledError):
            await t
        # the loop and the file still work after the cancellation
        w = os.open(fifo, os.O_WRONLY)
        os.write(w, b"after")
        got = await asyncio.wait_for(f.read(5), 5)
        os.close(w)
        await f.close()
        return got

    assert ring_run(go) == b"after"


def test_cancelled_open_leaks_no_fd(tmp_path: Path, run: Any, engine: str) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"x")

    async def go() -> int:
        await aio.os.stat(p)  # backend and executor warmed up
        before = nfds()
        for _ in range(50):
            # (a creating open: never done inline, so it really is in flight)
            t = asyncio.ensure_future(aio.open(p, "ab"))
            await asyncio.sleep(0)  # the open is queued (ring) or running (thread)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
        await asyncio.sleep(0.2)  # opens that completed after their callers left
        return nfds() - before

    assert run(go) == 0


def test_cached_small_file_never_leaves_the_loop(tmp_path: Path, run: Any) -> None:
    """Open (dentry cache), read (page cache) and close (read-only, local filesystem) of a
    hot small file complete inline: no ring submission, no thread hop; the fd is in
    blocking mode as builtin open would give it, and is closed afterwards."""
    import fcntl

    p = tmp_path / "small"
    p.write_bytes(b"hello world")

    async def go() -> Any:
        await aio.os.stat(p)
        b = get_backend()
        before = b.ring.submit_calls if isinstance(b, RingBackend) else 0
        fds = nfds()
        f = await aio.open(p, "rb")
        flags = fcntl.fcntl(f.fileno(), fcntl.F_GETFL)
        data = await f.read()
        await f.close()
        after = b.ring.submit_calls if isinstance(b, RingBackend) else 0
        try:
            await aio.open(tmp_path / "missing", "rb")
        except FileNotFoundError as e:
            err: Any = e
        return data, flags, after - before, nfds() - fds, err

    data, flags, submits, leaked, err = run(go)
    assert data == b"hello world"
    assert not flags & os.O_NONBLOCK
    assert submits == 0
    assert leaked == 0
    assert err.filename == str(tmp_path / "missing")


def test_fifo_open_waits_for_the_writer(tmp_path: Path, run: Any) -> None:
    """Opening a FIFO for reading waits for a writer, as builtin open does (io_uring's
    OPENAT would open it O_NONBLOCK and return at once; uringkit opens FIFOs on a
    thread), then reads what the writer sends."""
    import threading

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)

    def writer() -> None:
        fd = os.open(fifo, os.O_WRONLY)  # blocks until the reader has opened
        os.write(fd, b"through the pipe")
        os.close(fd)

    async def go() -> Any:
        t = asyncio.ensure_future(aio.open(fifo, "rb"))
        await asyncio.sleep(0.2)
        waited = not t.done()
        th = threading.Thread(target=writer)
        th.start()
        f = await asyncio.wait_for(t, 10)
        data = await f.read()
        await f.close()
        th.join()
        return waited, data

    assert run(go) == (True, b"through the pipe")


def _fifo_and_ring_loop(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> tuple[int, asyncio.AbstractEventLoop]:
    """A FIFO opened read-write (reads on it wait until someone writes) and a new loop
    whose files go through io_uring."""
    from conftest import PROBED

    if not PROBED:
        pytest.skip("io_uring unavailable")
    monkeypatch.setenv("URINGKIT_ENGINE", "io_uring")
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    return os.open(fifo, os.O_RDWR), asyncio.new_event_loop()


def test_loop_close_with_io_in_flight(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fd, loop = _fifo_and_ring_loop(tmp_path, monkeypatch)

    t = loop.run_until_complete(read_in_flight(fd))
    loop.close()  # cancels the read, waits for its completion, frees nothing early
    os.write(fd, b"late")
    assert os.read(fd, 4) == b"late"
    os.close(fd)
    assert not t.done() or t.cancelled()


def test_loop_close_with_pooled_direct_reads_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Closing a loop while O_DIRECT reads into its ring's read pool are in flight:
    the ring cancels them and waits for their completions before its registered
    buffers go; a new loop's ring reads the same data afterwards."""
    from conftest import PROBED

    if not PROBED:
        pytest.skip("io_uring unavailable")
    monkeypatch.setenv("URINGKIT_ENGINE", "io_uring")
    p = tmp_path / "d"
    data = direct_file(p, os.urandom(1 << 20))
    loop = asyncio.new_event_loop()

    files: list[Any] = []

    async def start() -> list[asyncio.Task[bytes]]:
        f = await aio.open(p, "rb", direct=True)
        files.append(f)
        tasks = [asyncio.ensure_future(f.read_at(4096, i * 4096)) for i in range(64)]
        await asyncio.sleep(0)  # all queued and submitted, none reaped
        return tasks

    tasks = loop.run_until_complete(start())
    loop.close()
    files[0]._close_now()  # (its loop is gone: closed with plain system calls)
    assert all(not t.done() or t.cancelled() or t.result() for t in tasks)

    async def again() -> bytes:
        async with aio.open(p, "rb", direct=True) as f:
            return await f.read_at(8192, 4096)

    assert asyncio.run(again()) == data[4096 : 4096 + 8192]


def test_loop_run_in_a_thread_closed_from_another(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The loop's ring accepts submissions from its own thread only (SINGLE_ISSUER, for
    DEFER_TASKRUN). A loop run in a worker thread and closed from the main thread with a
    read in flight: close() warns that the read was left to the kernel, raises nothing,
    and the read is cancelled (later data is not swallowed)."""
    import threading

    fd, loop = _fifo_and_ring_loop(tmp_path, monkeypatch)

    th = threading.Thread(target=loop.run_until_complete, args=(read_in_flight(fd),))
    th.start()
    th.join()
    b = _backends_of(loop)
    if not isinstance(b, RingBackend) or not b.single_issuer:
        loop.close()
        os.close(fd)
        pytest.skip("the loop's ring has no single issuer on this kernel")
    with pytest.warns(ResourceWarning, match="left to the kernel"):
        loop.close()
    os.write(fd, b"late")
    assert os.read(fd, 4) == b"late"
    os.close(fd)


def _backends_of(loop: asyncio.AbstractEventLoop) -> Any:
    from uringkit.aio._backend import _backends

    return _backends.get(loop)


def test_read_many_and_write_many(tmp_path: Path, run: Any) -> None:
    p = tmp_path / "f"
    data = os.urandom(200_000)
    p.write_bytes(data)
    ranges = [(0, 10), (199_990, 100), (4096 * 7, 4096), (300_000, 5), (12345, 0)]

    async def go() -> Any:
        got = await aio.read_many(p, ranges)
        async with await aio.open(p, "rb") as f:
            got2 = await aio.read_many(f, ranges[:2])
        n = await aio.write_many(tmp_path / "w", [(10, b"world"), (0, b"hello")])
        return got, got2, n

    got, got2, n = run(go)
    assert got == [data[o : o + ln] for o, ln in ranges]
    assert got2 == got[:2]
    assert n == [5, 5]
    assert (tmp_path / "w").read_bytes() == b"hello" + b"\0" * 5 + b"world"


def test_negative_offsets_and_lengths_are_refused(tmp_path: Path, run: Any) -> None:
    """A negative offset reaching the ring means "the current file position": a pread or
    pwrite at -1 would silently read or write in the wrong place. Each is a ValueError
    naming the argument, and the file is untouched."""
    p = tmp_path / "f"
    data = os.urandom(8192)
    p.write_bytes(data)

    async def go() -> None:
        f = await aio.open(p, "r+b")
        await f.seek(4096)
        with pytest.raises(ValueError, match=r"offset must be >= 0 \(got -1\)"):
            await f.read_at(10, -1)
        with pytest.raises(ValueError, match=r"length must be >= 0 \(got -1\)"):
            await f.read_at(-1, 0)
        with pytest.raises(ValueError, match="offset must be >= 0"):
            await f.write_at(b"oops", -1)
        with pytest.raises(ValueError, match="offset must be >= 0"):
            await f.readinto_at(bytearray(4), -1)
        with pytest.raises(ValueError, match=r"length must be >= 0 \(got -10, range 1\)"):
            await aio.read_many(f, [(0, 10), (0, -10)])
        with pytest.raises(ValueError, match=r"offset must be >= 0 \(got -5, range 0\)"):
            await aio.read_many(p, [(-5, 10)])
        with pytest.raises(ValueError, match="offset must be >= 0"):
            await aio.write_many(f, [(-1, b"oops")])
        assert await f.tell() == 4096
        await f.close()
        g = await aio.open(p, "rb", direct=True)
        with pytest.raises(ValueError, match="offset must be >= 0"):
            await aio.read_many(g, [(-4096, 4096)])
        await g.close()

    try:
        os.close(os.open(p, os.O_RDONLY | os.O_DIRECT))
    except OSError:
        pytest.skip(f"{tmp_path} refuses O_DIRECT")
    run(go)
    assert p.read_bytes() == data


def test_read_many_cold_ranges_go_out_in_one_submission(tmp_path: Path, run: Any) -> None:
    """Ranges not in the page cache (RocksDB's MultiGet case) are read in one batch."""
    p = tmp_path / "f"
    data = os.urandom(1 << 20)
    p.write_bytes(data)
    fd = os.open(p, os.O_RDONLY)
    os.fsync(fd)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    os.close(fd)
    ranges = [((i * 97) % 250 * 4096 + i, 3000) for i in range(64)]

    def calls(b: Any) -> int:
        """The ring's submissions, less the loop's own where uringkit.aio shares the
        loop's ring (each select of uringkit.loop is one)."""
        if not isinstance(b, RingBackend):
            return 0
        sel = getattr(b.loop, "_selector", None) if b.shared else None
        return int(b.ring.submit_calls) - (sel.selects if sel is not None else 0)

    async def go() -> Any:
        async with await aio.open(p, "rb") as f:
            b = get_backend()
            before = calls(b)
            got = await aio.read_many(f, ranges)
            after = calls(b)
        return got, after - before, isinstance(b, RingBackend)

    got, submits, ring = run(go)
    assert got == [data[o : o + n] for o, n in ranges]
    if ring:
        assert submits <= 2  # the misses in one submission (plus the open's)


def test_read_many_on_direct_file(tmp_path: Path, run: Any) -> None:
    """An O_DIRECT file's ranges are read into aligned memory, all in flight together;
    short at end of file; misaligned ranges get the alignment explanation; a cancelled
    read_many leaves the loop and the file usable."""
    p = tmp_path / "d"
    data = direct_file(p, os.urandom(1 << 20))
    ranges = [((i * 37) % 256 * 4096, 4096 * (1 + i % 3)) for i in range(64)]
    ranges.append(((1 << 20) - 4096, 8192))  # crosses end of file: short

    async def go() -> Any:
        async with await aio.open(p, "rb", direct=True) as f:
            got = await aio.read_many(f, ranges)
            try:
                await aio.read_many(f, [(0, 4096), (100, 512)])
                err = None
            except OSError as e:
                err = e
            t = asyncio.ensure_future(aio.read_many(f, ranges))
            await asyncio.sleep(0)
            t.cancel()
            with pytest.raises(asyncio.CancelledError):
                await t
            again = await aio.read_many(f.fileno(), ranges[:3])
        return got, err, again

    got, err, again = run(go)
    want = [data[o : o + n] for o, n in ranges]
    assert got == want
    assert len(got[-1]) == 4096
    assert again == want[:3]
    assert err is not None and err.errno == errno.EINVAL and "align" in str(err)


def test_direct_reads_any_range_misaligned_writes_explained(tmp_path: Path, run: Any) -> None:
    """An O_DIRECT file reads like a buffered one: read_at of any (n, offset), read(),
    read(n) at any position, iteration, readinto and readinto_at into unaligned memory
    all read the
    block-aligned range that covers what was asked (short at end of file). A write
    cannot do that (it would rewrite neighbouring bytes): a misaligned one is EINVAL
    with a message that says what must be aligned."""
    p = tmp_path / "d"
    data = direct_file(p, os.urandom((1 << 16) + 100))

    async def go() -> Any:
        async with aio.open(p, "r+b", direct=True) as f:
            got = [
                await f.read_at(8192, 4096),
                await f.read_at(100, 3),
                await f.read_at(5000, len(data) - 4000),
                await f.read_at(10, len(data) + 5),
            ]
            whole = await f.read()
            await f.seek(1000)
            part = await f.read(3000)
            await f.seek(0)
            lines = b"".join([line async for line in f])
            buf = bytearray(700)
            await f.seek(333)
            n = await f.readinto(memoryview(buf)[1:])
            at = bytearray(50)
            assert await f.readinto_at(at, 7) == 50 and at == data[7:57]
            try:
                await f.write_at(b"x" * 100, 3)
            except OSError as e:
                return got, whole, part, lines, n, bytes(buf[1:]), e
        raise AssertionError("misaligned O_DIRECT write succeeded")

    got, whole, part, lines, n, into, err = run(go)
    assert got == [data[4096 : 4096 + 8192], data[3:103], data[-4000:], b""]
    assert whole == data and lines == data and part == data[1000:4000]
    assert n == 699 and into == data[333 : 333 + 699]
    assert err.errno == errno.EINVAL and "align" in str(err)


def test_fsync_fdatasync_fallocate(tmp_path: Path, run: Any) -> None:
    async def go() -> int:
        async with await aio.open(tmp_path / "s", "wb") as f:
            await f.write(b"x" * 100)
            await f.fsync()
            await f.fdatasync()
            await f.fallocate(1 << 20)
        return os.path.getsize(tmp_path / "s")

    assert run(go) == 1 << 20


def test_many_concurrent_tasks(tmp_path: Path, run: Any) -> None:
    p = tmp_path / "f"
    data = os.urandom(1 << 20)
    p.write_bytes(data)

    async def go() -> bool:
        async with await aio.open(p, "rb") as f:
            sem = asyncio.Semaphore(64)

            async def one(i: int) -> bool:
                async with sem:
                    off = (i * 7919 % 256) * 4096
                    return await f.read_at(4096, off) == data[off : off + 4096]

            return all(await asyncio.gather(*(one(i) for i in range(2000))))

    assert run(go)


def test_direct_read_waves_submit_early_and_cancel_cleanly(tmp_path: Path, ring_run: Any) -> None:
    """A wave of O_DIRECT reads queued in one iteration goes to the kernel in chunks
    (EARLY_SUBMIT) before the iteration ends; cancelling some of them mid-flight leaves
    the others' data intact and the loop healthy."""
    from uringkit.aio._backend import EARLY_SUBMIT, get_backend

    p = tmp_path / "d"
    data = direct_file(p, os.urandom(1 << 20))

    async def go() -> None:
        async with await aio.open(p, "rb", direct=True) as f:
            ring = get_backend().ring
            offs = [(i * 37 % 256) * 4096 for i in range(100)]
            before = ring.submit_calls
            tasks = [asyncio.ensure_future(f.read_at(4096, o)) for o in offs]
            await asyncio.sleep(0)  # every task has queued its read, in one iteration
            # submitted in chunks while they were queued, not all at the iteration's end
            assert ring.submit_calls - before >= 100 // EARLY_SUBMIT
            for t in tasks[::3]:
                t.cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            for i, (o, r) in enumerate(zip(offs, done, strict=True)):
                if isinstance(r, asyncio.CancelledError):
                    assert i % 3 == 0
                else:
                    assert r == data[o : o + 4096], i
            assert await f.read_at(4096, 8192) == data[8192 : 8192 + 4096]

    ring_run(go)


def test_direct_reads_use_the_read_pool_and_cancel_returns_its_buffers(
    tmp_path: Path, ring_run: Any
) -> None:
    """O_DIRECT reads of up to FIXED_SIZE go through the loop ring's read pool (registered
    buffers, READ_FIXED). More reads in flight than the pool has buffers fall back to
    plain aligned buffers; a cancelled read's buffer returns to the pool only once its
    completion arrives (never while the kernel may still write into it) — after a storm
    of cancellations the pool is whole and every read that finished has its own data."""
    from uringkit.aio._backend import FIXED_COUNT, FIXED_SIZE, get_backend

    if FIXED_COUNT == 0:
        pytest.skip("URINGKIT_AIO_FIXED_BUFFERS=0")
    p = tmp_path / "d"
    data = direct_file(p, os.urandom(1 << 20))

    async def go() -> None:
        async with aio.open(p, "rb", direct=True) as f:
            ring = get_backend().ring
            assert ring.read_pool_free is None  # nothing registered before a direct read
            assert await f.read_at(4096, 4096) == data[4096:8192]
            assert ring.read_pool_free == FIXED_COUNT
            n = FIXED_COUNT + 72  # more than the pool: the rest use plain buffers
            offs = [(i * 37 % 256) * 4096 for i in range(n)]
            tasks = [asyncio.ensure_future(f.read_at(4096, o)) for o in offs]
            await asyncio.sleep(0)
            assert ring.read_pool_free == 0  # all lent out
            for t in tasks[::2]:
                t.cancel()
            done = await asyncio.gather(*tasks, return_exceptions=True)
            for i, (o, r) in enumerate(zip(offs, done, strict=True)):
                if not isinstance(r, asyncio.CancelledError):
                    assert r == data[o : o + 4096], i
            loop = asyncio.get_running_loop()
            deadline = loop.time() + 5
            while ring.read_pool_free != FIXED_COUNT and loop.time() < deadline:
                await asyncio.sleep(0.001)  # cancelled reads' completions still arriving
            assert ring.read_pool_free == FIXED_COUNT
            # short reads at the end of the file; reads of any size up to FIXED_SIZE
            # (an unaligned one: the blocks around it), larger ones use aligned buffers
            assert await f.read_at(4096, len(data) - 512) == data[-512:]
            assert await f.read_at(4096, len(data)) == b""
            assert await f.read_at(3 * 4096, 0) == data[: 3 * 4096]
            assert await f.read_at(FIXED_SIZE - 1000, 777) == data[777 : FIXED_SIZE - 223]
            big = FIXED_SIZE + 4096
            assert await f.read_at(big, 8192) == data[8192 : 8192 + big]
            assert ring.read_pool_free == FIXED_COUNT

    ring_run(go)


def test_direct_reads_without_registered_buffers(tmp_path: Path) -> None:
    """URINGKIT_AIO_FIXED_BUFFERS=0 (or a refused registration) reads O_DIRECT through
    plain aligned buffers, with the same results."""
    if not PROBED:
        pytest.skip("io_uring unavailable")
    p = tmp_path / "d"
    direct_file(p, os.urandom(1 << 16))
    code = f"""
import asyncio
from uringkit import aio
from uringkit.aio._backend import get_backend
async def go():
    async with aio.open({str(p)!r}, "rb", direct=True) as f:
        got = await asyncio.gather(*(f.read_at(4096, i * 4096) for i in range(16)))
        assert get_backend().ring.read_pool_free is None
        return b"".join(got)
assert asyncio.run(go()) == open({str(p)!r}, "rb").read()
print("ok")
"""
    env = dict(os.environ, URINGKIT_AIO_FIXED_BUFFERS="0", URINGKIT_ENGINE="io_uring")
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.stdout.strip() == "ok", out.stderr


def test_signal_storm_loses_no_completion(ring_run: Any) -> None:
    """Signals arriving every 100 µs interrupt system calls all through the loop's ring
    work (submits, the reaps that run deferred completions): 1,000 pipe round trips
    must all complete — an interrupted reap that left deferred work unrun would silence
    the ring's eventfd and hang here."""
    import signal

    async def go() -> int:
        rd, wr = os.pipe()
        old = signal.signal(signal.SIGALRM, lambda *_: None)
        signal.setitimer(signal.ITIMER_REAL, 0.0001, 0.0001)
        try:
            f = await aio.open(rd, "rb", buffering=0, closefd=False)
            n = 0
            for i in range(1000):
                pending = asyncio.ensure_future(f.read(8))
                await asyncio.sleep(0)  # the read is in flight before the data comes
                os.write(wr, b"%07d\n" % i)
                got = await asyncio.wait_for(pending, 10)
                n += got == b"%07d\n" % i
            return n
        finally:
            signal.setitimer(signal.ITIMER_REAL, 0, 0)
            # A SIGALRM generated just before the timer stopped may still be on its way
            # (to any thread) and its Python handler runs later in the main thread: it
            # must meet the no-op handler, not the one restored — pytest-timeout's, which
            # once reported "Timeout (>120.0s)" here in CI at once (that run's suite took
            # 184 s, not 120 s more than usual).
            time.sleep(0.02)
            signal.signal(signal.SIGALRM, old)
            os.close(rd)
            os.close(wr)

    assert ring_run(go) == 1000


def test_truncate_goes_through_the_ring(tmp_path: Path, run: Any, engine: str) -> None:
    """truncate() is IORING_OP_FTRUNCATE where the kernel has it (6.9+), not a thread hop."""
    from uringkit import Ring

    p = tmp_path / "f"
    p.write_bytes(b"x" * 1000)

    async def go() -> tuple[int, int]:
        f = await aio.open(p, "r+b")
        b = get_backend()
        before = b.ring.submit_calls if isinstance(b, RingBackend) else 0
        assert await f.truncate(10) == 10
        after = b.ring.submit_calls if isinstance(b, RingBackend) else 0
        await f.close()
        return os.path.getsize(p), after - before

    size, submits = run(go)
    assert size == 10
    if engine == "io_uring" and "ftruncate" in Ring.probe():
        assert submits >= 1


def test_loop_moved_to_another_thread_with_io_in_flight(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop whose uringkit.aio ring (SINGLE_ISSUER: only its thread may submit) was
    made in one thread, then run from another with a read in flight: the read's awaiter
    gets a RuntimeError saying why instead of waiting forever, and new I/O goes through
    a new ring made for the new thread. (uvloop's loop cannot be hooked: there the ring
    follows at the next flush, so a read in flight before the move waits until then.)"""

    fd, loop = _fifo_and_ring_loop(tmp_path, monkeypatch)
    (tmp_path / "f").write_bytes(b"hello world")

    stuck = loop.run_until_complete(read_in_flight(fd))
    b = _backends_of(loop)
    if not isinstance(b, RingBackend) or not b.single_issuer:
        loop.close()
        os.close(fd)
        pytest.skip("the ring has no single issuer on this kernel")
    out = resumed_in_another_thread(loop, stuck, tmp_path / "f")
    os.close(fd)
    assert len(out) == 2 and "moved to another thread" in out[0]
    assert out[1] == b"hello world"


def test_a_file_outlives_the_loop_that_opened_it(tmp_path: Path, run: Any) -> None:
    """As aiofiles' files: a file opened under one asyncio.run() is used, flushed and
    closed under the next — its buffered writes, O_DIRECT reads and text layer included
    (each operation goes to the running loop's ring; the first one's is closed)."""
    files: dict[str, Any] = {}
    p, t, d = tmp_path / "b", tmp_path / "t", tmp_path / "d"
    data = direct_file(d, os.urandom(8192))

    async def first() -> None:
        files["b"] = f = await aio.open(p, "w+b")
        await f.write(b"buffered ")  # still in the write buffer when this loop closes
        files["t"] = tf = await aio.open(t, "w+", encoding="utf-8")
        await tf.write("zeile ü\n")
        files["d"] = df = await aio.open(d, "rb", direct=True)
        assert len(await df.read_at(4096, 0)) == 4096

    async def second() -> tuple[bytes, str, bytes]:
        f, tf, df = files["b"], files["t"], files["d"]
        await f.write(b"then more")
        await f.seek(0)
        got = await f.read()
        await tf.seek(0)
        line = await tf.readline()
        block = await df.read_at(4096, 4096)
        for x in (f, tf, df):
            await x.close()
        return got, line, block

    run(first)
    got, line, block = run(second)
    assert got == b"buffered then more" and p.read_bytes() == got
    assert line == "zeile ü\n" and t.read_text(encoding="utf-8") == line
    assert block == data[4096:]
