"""The I/O backends behind `uringkit.aio`: one io_uring ring per event loop, or a thread
pool with identical behaviour when io_uring is blocked or `URINGKIT_ENGINE` says so.

The ring backend
- creates one ring per event loop, lazily, and registers an eventfd with it whose
  readability wakes the loop (`loop.add_reader`) — on uringkit.loop it uses the loop's
  own ring instead, whose select submits its SQEs and reaps its completions;
- queues SQEs as coroutines ask for them and submits everything queued during one loop
  iteration in a single `io_uring_enter` (a `call_soon` flush);
- reaps completions in batches and resolves each op's future;
- completes page-cache hits inline with `preadv2(RWF_NOWAIT)` before going to the ring
  (no loop round trip when the data is already in memory);
- on cancellation of the awaiting task, queues an AsyncCancel; the op's buffer stays alive
  in the ring until its completion arrives, and an `openat` that completes after its
  caller gave up has its fd closed.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import errno
import functools
import os
import threading
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol

from .._native import (
    Completion,
    LibaioContext,
    Ring,
    open_cached,
    pread_nowait,
    read_cached_many,
)
from ..engines import choose_engine, libaio_usable

RWF_NOWAIT: int = getattr(os, "RWF_NOWAIT", 0)
#: whether a task awaiting a read on the loop's ring resumes within the wake-up that
#: reaped its completion instead of through one call_soon Handle per task
#: (URINGKIT_DIRECT_WAKE=0 turns it off)
DIRECT_WAKE = os.environ.get("URINGKIT_DIRECT_WAKE", "1") != "0"

#: direct reads queued in one loop iteration before they are submitted without waiting
#: for the iteration's end (session 9, with DIRECT_WAKE, 64 O_DIRECT reads in flight
#: against the native job, 6 runs each: 2 → 0.78-0.90x, 8 → 0.79-0.86x; 1 and 3-4 no
#: better than 2)
EARLY_SUBMIT = int(os.environ.get("URINGKIT_EARLY_SUBMIT", "2"))
#: O_DIRECT reads of up to FIXED_SIZE bytes go through the loop ring's read pool: buffers
#: registered with it (READ_FIXED: no page pinning per read), lent per read, the bytes
#: copied out natively when the read completes. FIXED_COUNT of them: 1 MiB of locked
#: memory, registered at the first direct read; 0 turns this off (reads then use
#: unregistered aligned buffers, as when the registration is refused by RLIMIT_MEMLOCK
#: or more reads are in flight than the pool has buffers). 16 KiB covers the block sizes
#: of direct-I/O stores and the aligned range around an unaligned 4 KiB read; 64 of them
#: cover 64 reads in flight (16 KiB reads: 9.3 vs 10-12.7 us of CPU per read through
#: plain buffers; 4 KiB reads as fast as with the 128 x 4 KiB pool it replaces).
FIXED_SIZE = 16384
FIXED_COUNT = int(os.environ.get("URINGKIT_AIO_FIXED_BUFFERS", "64"))
AT_FDCWD = -100
AT_EMPTY_PATH = 0x1000
AT_SYMLINK_NOFOLLOW = 0x100
AT_REMOVEDIR = 0x200


def _oserror(res: int, what: str, path: Any = None) -> OSError:
    code = -res
    msg = os.strerror(code)
    if path is not None:
        return OSError(code, msg, os.fspath(path) if not isinstance(path, int) else str(path))
    e = OSError(code, f"{msg} ({what})")
    return e


class Backend(Protocol):
    name: str

    async def openat(self, path: Any, flags: int, mode: int) -> int: ...
    async def close(self, fd: int) -> None: ...
    async def pread(self, fd: int, n: int, offset: int) -> bytes: ...
    async def preadinto(self, fd: int, buf: Any, offset: int) -> int: ...
    async def pwrite(self, fd: int, data: Any, offset: int) -> int: ...
    async def fsync(self, fd: int, datasync: bool) -> None: ...
    async def fallocate(self, fd: int, mode: int, offset: int, length: int) -> None: ...
    async def ftruncate(self, fd: int, length: int) -> None: ...
    async def read_many(self, fd: int, ranges: Sequence[tuple[int, int]]) -> list[bytes]: ...
    async def run(self, fn: Callable[..., Any], *args: Any) -> Any: ...


_pool: concurrent.futures.ThreadPoolExecutor | None = None


def _executor() -> concurrent.futures.ThreadPoolExecutor:
    """The thread pool of the thread backend (and of ops io_uring lacks): shared by every
    loop, sized like asyncio's default executor."""
    global _pool
    if _pool is None:
        _pool = concurrent.futures.ThreadPoolExecutor(
            max_workers=min(32, (os.cpu_count() or 1) + 4), thread_name_prefix="uringkit-aio"
        )
    return _pool


_Woken = list[tuple[Callable[[Any], None], Any, contextvars.Context]]


def _take_waiter(fut: asyncio.Future[Any], wake: _Woken) -> None:
    """Before `fut` gets its result: when its only done-callback is waiting (the task
    awaiting it), take it off and add it to `wake` for `_run_woken` (Ring.dispatch does
    the same natively for the futures it resolves)."""
    cbs = getattr(fut, "_callbacks", None)
    if cbs is not None and len(cbs) == 1:
        cb, ctx = cbs[0]
        fut.remove_done_callback(cb)
        wake.append((cb, fut, ctx))


def _run_woken(loop: asyncio.AbstractEventLoop, wake: _Woken) -> None:
    """Run the callbacks `_take_waiter`/`Ring.dispatch` took off resolved futures — what
    call_soon would run one Handle each — here, in one: a task awaiting I/O resumes in
    its own context, as it would from the ready queue. Only ever called from a loop
    callback (an eventfd reader, the end-of-iteration flush), never inside a task."""
    for i, (cb, fut, ctx) in enumerate(wake):
        try:
            ctx.run(cb, fut)
        except (SystemExit, KeyboardInterrupt):
            # leaving the loop: the tasks not resumed yet go back to the ready queue
            # (their futures are done; nothing else would wake them)
            for cb2, fut2, ctx2 in wake[i + 1 :]:
                loop.call_soon(cb2, fut2, context=ctx2)
            raise
        except BaseException as exc:
            loop.call_exception_handler(
                {"message": f"Exception in callback {cb!r}", "exception": exc, "future": fut}
            )


class ThreadBackend:
    """Blocking calls on the loop's default executor: aiofiles' model."""

    name = "threads"

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.loop.run_in_executor(_executor(), fn, *args)

    async def openat(self, path: Any, flags: int, mode: int) -> int:
        hot = _open_inline(path, flags)
        if hot is not None and hot != FIFO:
            return hot
        return await _open_on_thread(self.loop, path, flags, mode)

    async def close(self, fd: int) -> None:
        await self.run(os.close, fd)

    async def pread(self, fd: int, n: int, offset: int, nowait: bool = True) -> bytes:
        if nowait and n > 0:
            hit = pread_nowait(fd, n, offset)
            if hit is not None and (len(hit) == n or not hit):
                return hit
        return await self.run(_pread_full, fd, n, offset)  # type: ignore[no-any-return]

    async def preadinto(self, fd: int, buf: Any, offset: int, nowait: bool = True) -> int:
        return await self.run(_preadinto_full, fd, buf, offset)  # type: ignore[no-any-return]

    async def read_direct(self, fd: int, buf: Any, n: int, offset: int) -> int:
        view = memoryview(buf)[:n]
        return await self.run(_preadinto_full, fd, view, offset)  # type: ignore[no-any-return]

    async def read_into_many(
        self, fd: int, bufs: Sequence[Any], ranges: Sequence[tuple[int, int]]
    ) -> list[int]:
        """Reads of many ranges, each into its buffer (aligned for O_DIRECT), all in
        flight together; the byte counts in request order, short reads completed."""
        return list(
            await asyncio.gather(
                *(self.read_direct(fd, b, n, o) for (o, n), b in zip(ranges, bufs, strict=True))
            )
        )

    async def pwrite(self, fd: int, data: Any, offset: int) -> int:
        return await self.run(_pwrite_full, fd, data, offset)  # type: ignore[no-any-return]

    async def fsync(self, fd: int, datasync: bool) -> None:
        await self.run(os.fdatasync if datasync else os.fsync, fd)

    async def ftruncate(self, fd: int, length: int) -> None:
        await self.run(os.ftruncate, fd, length)

    async def fallocate(self, fd: int, mode: int, offset: int, length: int) -> None:
        if mode:
            raise OSError(errno.EOPNOTSUPP, "fallocate modes need the io_uring backend")
        await self.run(os.posix_fallocate, fd, offset, length)

    async def read_many(self, fd: int, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Page-cache hits inline (one native call, no thread hop); the rest in one job
        on the pool."""
        ranges = list(ranges)
        got_cached, unsettled = read_cached_many(fd, ranges)
        out: list[Any] = got_cached
        misses = (
            [i for i, r in enumerate(out) if not _complete(fd, ranges[i], r)] if unsettled else []
        )
        if misses:
            got = await self.run(
                lambda: [_pread_full(fd, ranges[i][1], ranges[i][0]) for i in misses]
            )
            for i, b in zip(misses, got, strict=True):
                out[i] = b
        return out


class LibaioBackend(ThreadBackend):
    """Where io_uring is blocked: O_DIRECT reads and writes go through Linux native AIO
    (truly asynchronous there), woken through an eventfd like the ring; everything else
    runs on the thread pool."""

    name = "libaio"

    def __init__(self, loop: asyncio.AbstractEventLoop, depth: int = 1024) -> None:
        super().__init__(loop)
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.ctx = LibaioContext(depth, self.efd)
        self.waiting: dict[int, asyncio.Future[int]] = {}
        self.next_ud = 1
        self.closed = False
        loop.add_reader(self.efd, self._on_ready)

    def _on_ready(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.efd)
        wake: _Woken | None = [] if DIRECT_WAKE else None
        for ud, res in self.ctx.completions():
            fut = self.waiting.pop(ud, None)
            if fut is not None and not fut.done():
                if wake is not None:
                    _take_waiter(fut, wake)
                fut.set_result(res)
        if wake:
            _run_woken(self.loop, wake)  # (as the ring's reap does)

    async def _io(self, submit: Callable[[int], None]) -> int:
        ud = self.next_ud
        self.next_ud = ud + 1
        fut: asyncio.Future[int] = self.loop.create_future()
        self.waiting[ud] = fut
        try:
            submit(ud)
        except BaseException:
            self.waiting.pop(ud, None)
            raise
        # A cancelled task leaves the request running; the context keeps its buffer until
        # the completion is reaped, and the result is dropped.
        return await fut

    @staticmethod
    def _is_direct(fd: int) -> bool:
        import fcntl

        return bool(fcntl.fcntl(fd, fcntl.F_GETFL) & os.O_DIRECT)

    async def read_direct(self, fd: int, buf: Any, n: int, offset: int) -> int:
        try:
            res = await self._io(lambda ud: self.ctx.read(fd, buf, offset, ud, n))
        except OSError as e:
            if e.errno != errno.EAGAIN:
                raise
            return await super().read_direct(fd, buf, n, offset)  # queue full: a thread
        if res < 0:
            raise OSError(-res, os.strerror(-res))
        return res

    async def pwrite(self, fd: int, data: Any, offset: int) -> int:
        if offset < 0 or not self._is_direct(fd):
            return await super().pwrite(fd, data, offset)
        mv = memoryview(data).cast("B")
        res = await self._io(lambda ud: self.ctx.write(fd, mv, offset, ud))
        if res < 0:
            raise OSError(-res, os.strerror(-res))
        if res < len(mv):
            res += await super().pwrite(fd, mv[res:], offset + res)
        return res

    def shutdown(self) -> None:
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(Exception):
            self.loop.remove_reader(self.efd)
        self.ctx.close()  # waits for what is in flight
        os.close(self.efd)
        for fut in self.waiting.values():
            if not fut.done():
                fut.cancel()
        self.waiting.clear()


def _pread_full(fd: int, n: int, offset: int) -> bytes:
    """n bytes (fewer only at EOF) at offset; offset < 0 reads at the stream position."""
    chunks = []
    while n > 0:
        b = os.read(fd, n) if offset < 0 else os.pread(fd, n, offset)
        if not b:
            break
        chunks.append(b)
        n -= len(b)
        if offset >= 0:
            offset += len(b)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def _preadinto_full(fd: int, buf: Any, offset: int) -> int:
    mv = memoryview(buf).cast("B")
    done = 0
    while done < len(mv):
        r = os.readv(fd, [mv[done:]]) if offset < 0 else os.preadv(fd, [mv[done:]], offset + done)
        if r == 0:
            break
        done += r
    return done


def _pwrite_full(fd: int, data: Any, offset: int) -> int:
    mv = memoryview(data).cast("B")
    done = 0
    while done < len(mv):
        if offset < 0:
            done += os.write(fd, mv[done:])
        else:
            done += os.pwrite(fd, mv[done:], offset + done)
    return done


#: on uringkit.loop, whether uringkit.aio queues its operations on the loop's own ring
#: (its completions reaped by the loop's select, no eventfd) instead of a ring of its own
#: (URINGKIT_AIO_SHARED_RING=0: a ring of its own, as on any other loop)
SHARED_RING = os.environ.get("URINGKIT_AIO_SHARED_RING", "1") != "0"
#: user_data of operations on a shared ring: a range of their own (bit 61), apart from
#: the loop's polls and transports (counted from 1) and the native fast reads (bit 62)
SHARED_UD = 1 << 61


class RingBackend:
    """One io_uring per event loop: the loop's own on uringkit.loop (`shared`), else one
    of its own whose eventfd wakes the loop."""

    name = "io_uring"

    def __init__(self, loop: asyncio.AbstractEventLoop, entries: int = 256) -> None:
        self.loop = loop
        self.ops = Ring.probe()  # (cached by the native side: one probe per process)
        self.waiting: dict[
            int, tuple[asyncio.Future[Completion], Callable[[Completion], None] | None]
        ] = {}
        # futures resolved natively by Ring.dispatch (result: res, or the Completion
        # when res < 0): the hot path of O_DIRECT reads
        self.fast: dict[int, asyncio.Future[Any]] = {}
        # asyncio's create_future is a Python method around Future(loop=loop): skip the
        # frame where it is the stock one (uvloop's is native already)
        self.new_future: Callable[[], asyncio.Future[Any]] = (
            functools.partial(asyncio.Future, loop=loop)
            if getattr(type(loop), "create_future", None) is asyncio.BaseEventLoop.create_future
            else loop.create_future
        )
        # whether the read pool for direct reads (see FIXED_SIZE) was set up / tried
        self.pool_tried = False
        self.unsubmitted = 0
        self.next_ud = 1
        self.flush_pending = False
        self.closed = False
        self.efd = -1
        # sockets (fd) whose last receives, tried before the ring, found no data: how
        # many in a row (see aio.sock._try_now)
        self.recv_misses: dict[int, int] = {}
        sel = getattr(loop, "_selector", None)
        share = getattr(sel, "share_ring", None) if SHARED_RING else None
        ring = share(self) if share is not None else None
        self.shared = ring is not None
        if ring is not None:
            # The loop's select submits what is queued and reaps (resolving the fast
            # futures natively, handing the rest to `complete`): nothing to schedule
            # (flush_pending stays set) and no eventfd.
            self.ring = ring
            self.single_issuer: bool = getattr(sel, "single_issuer", False)
            self.thread = threading.get_ident()  # (the loop's selector follows threads)
            self.next_ud = SHARED_UD
            self.flush_pending = True
            return
        self.entries = entries
        self.ring, self.single_issuer = self._own_ring()
        self.thread = threading.get_ident()  # (the ring's issuer, if single_issuer)
        self.efd = os.eventfd(0, os.EFD_NONBLOCK | os.EFD_CLOEXEC)
        self.ring.register_eventfd(self.efd)
        loop.add_reader(self.efd, self._on_ready)

    def _own_ring(self) -> tuple[Ring, bool]:
        try:
            # Completions wait as deferred task work until the loop reaps them (the
            # eventfd still fires when they arrive) instead of interrupting whatever the
            # loop thread runs: +12-17 % O_DIRECT reads/s with 64 in flight. Only this
            # thread may then submit or reap, which is how a loop's ring is used anyway.
            return Ring(self.entries, single_issuer=True, defer_taskrun=True), True
        except OSError:  # kernels before 6.1
            return Ring(self.entries), False

    def _follow_thread(self) -> None:
        """The loop now runs in another thread than the one its ring was made for (a
        SINGLE_ISSUER ring refuses every other thread): a new ring here, and what was
        queued or in flight on the old one fails with a RuntimeError saying why —
        nobody could submit or reap it any more."""
        old = self.ring
        self.ring, self.single_issuer = self._own_ring()
        self.thread = threading.get_ident()
        self.ring.register_eventfd(self.efd)
        self.ring_moved(self.ring)
        self.unsubmitted = 0
        # (closing it from here is refused for its ops: the kernel cancels them, and
        # their memory is kept — a ResourceWarning says so)
        with contextlib.suppress(OSError):
            old.close()

    # ----- plumbing ----------------------------------------------------------------------

    def _flush(self) -> None:
        self.flush_pending = self.shared
        self.unsubmitted = 0
        if not self.closed:
            if self.single_issuer and not self.shared and threading.get_ident() != self.thread:
                self._follow_thread()
                return
            self.ring.submit()
            if not self.shared and self.ring.cq_ready:
                # Ops that completed inline (cached opens, stats, closes…): reap them now
                # instead of one loop iteration later through the eventfd. _on_ready
                # clears the eventfd before reaping, so nothing posted later is missed.
                # (A shared ring's are reaped by the loop's select, next.)
                self._on_ready()

    def _on_ready(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.eventfd_read(self.efd)
        if self.single_issuer and threading.get_ident() != self.thread:
            self._follow_thread()
            return
        self._reap()

    def _reap(self) -> None:
        # (only ever called from a loop callback — the eventfd reader or _flush — never
        # from inside a task, so the tasks woken below may run right here)
        wake: _Woken | None = [] if DIRECT_WAKE else None
        self.complete(self.ring.dispatch(self.fast, wake), wake)
        if wake:
            _run_woken(self.loop, wake)

    def complete(self, done: list[Completion], wake: _Woken | None) -> None:
        """Resolve the futures of `done` (completions `Ring.dispatch` left), adding the
        tasks they wake to `wake` (see `_take_waiter`); the caller runs those."""
        for c in done:
            entry = self.waiting.get(c.user_data)
            if entry is None or c.more:
                continue
            del self.waiting[c.user_data]
            fut, orphan = entry
            if fut.done():
                if orphan is not None:
                    orphan(c)
            else:
                if wake is not None:
                    _take_waiter(fut, wake)
                fut.set_result(c)

    def ring_moved(self, ring: Ring) -> None:
        """The shared ring's loop moved to another thread and onto `ring`: what was in
        flight on the old one cannot complete here — its awaiters get a RuntimeError
        saying so (the old ring's close keeps their memory from the kernel's reach)."""
        self.ring = ring
        self.pool_tried = False
        err = (
            "the event loop moved to another thread: its io_uring operations in flight "
            "were abandoned"
        )
        for fut, _ in self.waiting.values():
            if not fut.done():
                fut.set_exception(RuntimeError(err))
        for f in self.fast.values():
            if not f.done():
                f.set_exception(RuntimeError(err))
        self.waiting.clear()
        self.fast.clear()

    def _schedule(self) -> None:
        if not self.flush_pending:
            self.flush_pending = True
            self.loop.call_soon(self._flush)

    async def op(
        self, queue: Callable[[int], None], orphan: Callable[[Completion], None] | None = None
    ) -> Completion:
        """Queue one SQE (via `queue(user_data)`), submit with this iteration's batch,
        and wait for its completion. If the awaiting task is cancelled, the SQE is
        cancelled too; its memory stays with the ring until the completion arrives, and
        `orphan(completion)` then cleans up what nobody will use (an opened fd)."""
        if self.closed:
            raise RuntimeError("the event loop's ring is closed")
        ud = self.next_ud
        self.next_ud = ud + 1
        queue(ud)
        fut: asyncio.Future[Completion] = self.loop.create_future()
        self.waiting[ud] = (fut, orphan)
        self.unsubmitted += 1
        if self.unsubmitted >= EARLY_SUBMIT:
            self.unsubmitted = 0  # a wave of ops: start these now (see start_read)
            self.ring.submit()
        elif not self.flush_pending:
            self.flush_pending = True
            self.loop.call_soon(self._flush)
        try:
            return await fut
        except asyncio.CancelledError:
            if ud in self.waiting and not self.closed:
                self.ring.cancel(ud)
                self._schedule()
            raise

    async def write_datasync(self, fd: int, data: Any, offset: int) -> tuple[int, int]:
        """One write linked to an fdatasync, in this iteration's submission: the results
        (bytes written or -errno; 0 or -errno — -ECANCELED if the write came up short).
        Not cancellable: the caller (a group commit) must learn how it ended."""
        if self.closed:
            raise RuntimeError("the event loop's ring is closed")
        ud = self.next_ud
        self.next_ud = ud + 2
        if self.ring.sq_space_left < 2:
            # a full SQ would submit the write alone, cutting its link to the fdatasync
            self.ring.submit()
        self.ring.write(fd, data, offset, user_data=ud, link=True)
        self.ring.fsync(fd, datasync=True, user_data=ud + 1)
        w: asyncio.Future[Completion] = self.loop.create_future()
        f: asyncio.Future[Completion] = self.loop.create_future()
        self.waiting[ud] = (w, None)
        self.waiting[ud + 1] = (f, None)
        self._schedule()
        return (await w).res, (await f).res

    def shutdown(self) -> None:
        """Cancel what is in flight and wait for it (the ring does), then release. A
        shared ring is the loop's: closing the loop closes it (after this)."""
        if self.closed:
            return
        self.closed = True
        if self.shared:
            with contextlib.suppress(Exception):
                self.loop._selector.unshare_ring(self)  # type: ignore[attr-defined]
        else:
            with contextlib.suppress(Exception):
                self.loop.remove_reader(self.efd)
            self.ring.close()
            os.close(self.efd)
        for fut, _ in self.waiting.values():
            if not fut.done():
                fut.cancel()
        self.waiting.clear()
        for f in self.fast.values():
            if not f.done():
                f.cancel()
        self.fast.clear()

    # ----- operations ----------------------------------------------------------------------

    def _read(self, fd: int, buf: memoryview, offset: int, ud: int) -> None:
        self.ring.read(fd, buf, offset, user_data=ud)

    def _write(self, fd: int, buf: memoryview, offset: int, ud: int) -> None:
        self.ring.write(fd, buf, offset, user_data=ud)

    async def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return await self.loop.run_in_executor(_executor(), fn, *args)

    async def openat(self, path: Any, flags: int, mode: int) -> int:
        hot = _open_inline(path, flags)
        if hot == FIFO:
            return await _open_on_thread(self.loop, path, flags, mode)
        if hot is not None:
            return hot

        def orphan(c: Completion) -> None:
            if c.res >= 0:
                os.close(c.res)  # the caller gave up: leak no fd

        c = await self.op(lambda ud: self.ring.openat(path, flags, mode, user_data=ud), orphan)
        if c.res < 0:
            raise _oserror(c.res, "open", path)
        return c.res

    async def close(self, fd: int) -> None:
        c = await self.op(lambda ud: self.ring.close(fd, user_data=ud))
        if c.res < 0:
            raise _oserror(c.res, "close")

    async def preadinto(self, fd: int, buf: Any, offset: int, nowait: bool = True) -> int:
        mv = memoryview(buf).cast("B")
        total = len(mv)
        done = 0
        if nowait and RWF_NOWAIT and total:
            try:
                done = os.preadv(fd, [mv], offset, RWF_NOWAIT)
            except OSError as e:
                # EAGAIN (BlockingIOError): not in the page cache — the ring reads it.
                # (Until session 30 EAGAIN was taken as 0 bytes, i.e. the end of the file:
                # readinto() on a cold file returned 0. Found by
                # tests/aio/test_files_random.py.)
                if e.errno not in (errno.EOPNOTSUPP, errno.EINVAL, errno.EAGAIN):
                    raise
                done = -1
            if done == total or done == 0:
                return done  # all of it, or end of file (uncached data is EAGAIN, not 0)
            if done < 0:
                done = 0
            elif offset >= 0 and _at_eof(fd, offset + done):
                return done
        return await self._transfer(fd, mv, offset, done, write=False)

    def start_read(self, fd: int, buf: Any, n: int, offset: int) -> asyncio.Future[Any]:
        """Queue one read into `buf` (O_DIRECT: no page-cache fast path) with this
        iteration's batch; the future gets the bytes read, or the Completion of a failed
        read. If the awaiting task is cancelled, call `cancel_read`.

        Many reads queued in one iteration (a wave of completions resubmitting) go to the
        device every EARLY_SUBMIT, while the rest of the wave is processed — otherwise the
        disk idles while the loop works and the loop idles while the disk does. One
        native call queues the SQE, creates the future and does that counting."""
        if self.closed:
            raise RuntimeError("the event loop's ring is closed")
        fut: asyncio.Future[Any] = self.ring.read_future(
            fd, buf, n, offset, self.new_future, self.fast, EARLY_SUBMIT
        )
        if not self.flush_pending:
            self.flush_pending = True
            self.loop.call_soon(self._flush)
        return fut

    def _queue_read(self, fd: int, buf: Any, n: int, offset: int) -> asyncio.Future[Any]:
        if self.closed:
            raise RuntimeError("the event loop's ring is closed")
        ud = self.next_ud
        self.next_ud = ud + 1
        self.ring.read(fd, buf, offset, nbytes=n, user_data=ud)
        fut: asyncio.Future[Any] = self.loop.create_future()
        self.fast[ud] = fut
        return fut

    async def fast_op(self, queue: Callable[[int], None]) -> Any:
        """Queue one SQE (`queue(user_data)`) with this iteration's batch and wait: its
        `res` (an int), or the Completion of a failed op. The futures are resolved
        natively (Ring.dispatch), the hot path of socket and O_DIRECT I/O. If the
        awaiting task is cancelled, so is the SQE (its memory stays with the ring)."""
        fut = self.fast_future(queue)
        try:
            return await fut
        except asyncio.CancelledError:
            self.cancel_read(fut)
            raise

    def fast_future(self, queue: Callable[[int], None]) -> asyncio.Future[Any]:
        """`fast_op` without the coroutine: queue the SQE and return its future, which
        the caller awaits — and on cancellation passes to `cancel_read`."""
        if self.closed:
            raise RuntimeError("the event loop's ring is closed")
        ud = self.next_ud
        self.next_ud = ud + 1
        queue(ud)
        fut: asyncio.Future[Any] = self.new_future()
        self.fast[ud] = fut
        if not self.flush_pending:
            self.flush_pending = True
            self.loop.call_soon(self._flush)
        return fut

    def cancel_read(self, fut: asyncio.Future[Any]) -> None:
        """Cancel the SQE of a `start_read` whose task was cancelled (its memory stays
        with the ring until the kernel lets go)."""
        for ud, f in self.fast.items():
            if f is fut:
                del self.fast[ud]
                if not self.closed:
                    self.ring.cancel(ud)
                    self._schedule()
                return

    def register_pool(self) -> None:
        """Register the ring's read pool for direct reads, on first use (refused by
        RLIMIT_MEMLOCK or turned off: reads use unregistered aligned buffers)."""
        self.pool_tried = True
        if FIXED_COUNT > 0 and not self.closed:
            with contextlib.suppress(OSError, ValueError):
                self.ring.register_read_pool(FIXED_COUNT, FIXED_SIZE)

    async def read_direct(self, fd: int, buf: Any, n: int, offset: int) -> int:
        """One read into an aligned buffer (O_DIRECT), no page-cache fast path."""
        fut = self.start_read(fd, buf, n, offset)
        try:
            r = await fut
        except asyncio.CancelledError:
            self.cancel_read(fut)
            raise
        return await self.finish_read(fd, buf, n, offset, r)

    async def read_into_many(
        self, fd: int, bufs: Sequence[Any], ranges: Sequence[tuple[int, int]]
    ) -> list[int]:
        """Reads of many ranges in one submission (no page-cache fast path), resolved
        natively (no task per read); a cancelled caller cancels the SQEs still in flight
        (their buffers stay with the ring until the kernel lets go)."""
        futs = [self._queue_read(fd, b, n, o) for (o, n), b in zip(ranges, bufs, strict=True)]
        self._flush()  # the whole batch now, in one system call
        try:
            results = [await f for f in futs]
        except BaseException:
            for f in futs:
                if not f.done():
                    self.cancel_read(f)
            raise
        return [
            r if type(r) is int and (r == n or r == 0) else await self.finish_read(fd, b, n, o, r)
            for (o, n), b, r in zip(ranges, bufs, results, strict=True)
        ]

    async def finish_read(self, fd: int, buf: Any, n: int, offset: int, r: Any) -> int:
        """The result of a `start_read`: errors raised, short reads completed."""
        if type(r) is not int:
            raise OSError(-r.res, r.message or os.strerror(-r.res))
        if 0 < r < n:
            rest = memoryview(buf)[r:n]
            return r + await self.preadinto(fd, rest, offset + r, nowait=False)
        return r

    async def pread(self, fd: int, n: int, offset: int, nowait: bool = True) -> bytes:
        if n <= 0:
            return b""
        if nowait:
            hit = pread_nowait(fd, n, offset)
            if hit is not None and (len(hit) == n or not hit):
                return hit
        buf = bytearray(n)
        got = await self.preadinto(fd, buf, offset, nowait=False)
        # (no resizing: a completion may still reference a view of buf)
        return bytes(buf) if got == n else bytes(buf[:got])

    async def pwrite(self, fd: int, data: Any, offset: int) -> int:
        return await self._transfer(fd, memoryview(data).cast("B"), offset, 0, write=True)

    async def _transfer(self, fd: int, mv: memoryview, offset: int, done: int, write: bool) -> int:
        """Read into / write from `mv[done:]` through the ring until all of it moved (a read
        stops early at end of file); short transfers continue, EAGAIN is retried.
        `offset < 0` means the stream position."""
        queue = self._write if write else self._read
        while done < len(mv):
            off = -1 if offset < 0 else offset + done
            c = await self.op(functools.partial(queue, fd, mv[done:], off))
            if c.res < 0:
                if c.res == -errno.EAGAIN:
                    continue
                if c.message:
                    raise OSError(-c.res, c.message)
                raise _oserror(c.res, "write" if write else "read")
            if c.res == 0:
                if write:
                    raise OSError(errno.EIO, "write made no progress")
                break
            done += c.res
        return done

    async def fsync(self, fd: int, datasync: bool) -> None:
        c = await self.op(lambda ud: self.ring.fsync(fd, datasync=datasync, user_data=ud))
        if c.res < 0:
            raise _oserror(c.res, "fsync")

    async def fallocate(self, fd: int, mode: int, offset: int, length: int) -> None:
        c = await self.op(
            lambda ud: self.ring.fallocate(fd, length, offset, mode=mode, user_data=ud)
        )
        if c.res < 0:
            raise _oserror(c.res, "fallocate")

    async def ftruncate(self, fd: int, length: int) -> None:
        """IORING_OP_FTRUNCATE where the kernel has it (6.9+), else the thread pool."""
        if "ftruncate" not in self.ops:
            await self.run(os.ftruncate, fd, length)
            return
        c = await self.op(lambda ud: self.ring.ftruncate(fd, length, user_data=ud))
        if c.res < 0:
            raise _oserror(c.res, "ftruncate")

    async def read_many(self, fd: int, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
        """Page-cache hits inline — one system call for all ranges (a batch of
        RWF_NOWAIT reads, each into its own new bytes object) — and the rest as one batch
        of SQEs on the loop's ring; short reads completed."""
        ranges = list(ranges)
        got_cached, unsettled = read_cached_many(fd, ranges)
        out: list[Any] = got_cached
        if not unsettled:
            return out  # every range whole (or empty: at or past end of file)
        misses = [(i, *ranges[i]) for i, r in enumerate(out) if not _complete(fd, ranges[i], r)]
        if misses:
            bufs = [bytearray(n) for _, _, n in misses]
            got = await self.read_into_many(fd, bufs, [(off, n) for _, off, n in misses])
            for (i, _, n), b, g in zip(misses, bufs, got, strict=True):
                out[i] = bytes(b) if g == n else bytes(b[:g])
        return out

    async def statx(self, path: Any, dir_fd: int, flags: int) -> dict[str, Any]:
        c = await self.op(
            lambda ud: self.ring.statx(path, dir_fd=dir_fd, flags=flags, user_data=ud)
        )
        if c.res < 0:
            raise _oserror(c.res, "stat", path if path != "" else None)
        return c.result  # type: ignore[no-any-return]


async def _open_on_thread(loop: asyncio.AbstractEventLoop, path: Any, flags: int, mode: int) -> int:
    """os.open on the thread pool; if the caller gives up, the fd is closed when the
    open finishes."""
    cf = _executor().submit(os.open, path, flags, mode)
    try:
        fd: int = await asyncio.wrap_future(cf, loop=loop)
    except asyncio.CancelledError:

        def closer(f: concurrent.futures.Future[int]) -> None:
            if not f.cancelled() and f.exception() is None:
                os.close(f.result())

        cf.add_done_callback(closer)
        raise
    return fd


FIFO = -2


def _open_inline(path: Any, flags: int) -> int | None:
    """Open without leaving the loop when that cannot block (dentry-cache lookup, like
    io_uring's own inline attempt): the fd; None to open asynchronously; FIFO for a
    FIFO, whose open must wait for the other end — on a thread, as builtin open would
    (io_uring's OPENAT opens it O_NONBLOCK and does not wait)."""
    if isinstance(path, int):
        return None
    try:
        fd = open_cached(path, flags)
    except OSError as e:
        raise _oserror(-(e.errno or errno.EIO), "open", path) from None
    except (TypeError, ValueError):
        return None  # let the asynchronous open report it as os.open would
    return fd if fd != -1 else None


def _complete(fd: int, rng: tuple[int, int], r: bytes | int) -> bool:
    """Whether a read_cached_many result is the final answer for its range: all of it,
    or a short read that ends at end of file (not a partly cached range)."""
    if type(r) is not bytes:
        return False
    return len(r) == rng[1] or not r or _at_eof(fd, rng[0] + len(r))


def _at_eof(fd: int, pos: int) -> bool:
    try:
        return os.fstat(fd).st_size <= pos
    except OSError:
        return False


_backends: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()


#: the last (loop, backend) get_backend answered: the hot path of sock_* and files asks
#: again on every call, and a WeakKeyDictionary lookup makes a weakref each time
_last: tuple[Any, Any] = (None, None)


def get_backend(direct: bool = False) -> Any:
    """The running loop's backend, created on first use."""
    global _last
    loop = asyncio.get_running_loop()
    last = _last
    if last[0] is loop:
        return last[1]
    b = _backends.get(loop)
    if b is not None:
        _last = (loop, b)
    if b is None:
        # O_DIRECT or not is decided per file later, so pick as for O_DIRECT work: where
        # io_uring is blocked, libaio serves O_DIRECT files and threads everything else.
        choice = choose_engine(direct=True)
        b = None
        if choice.name == "io_uring":
            with contextlib.suppress(OSError):
                b = RingBackend(loop)
        if b is None and choice.name in ("io_uring", "libaio") and libaio_usable()[0]:
            with contextlib.suppress(OSError):
                b = LibaioBackend(loop)
        if b is None:
            b = ThreadBackend(loop)
        _backends[loop] = b
        if isinstance(b, (RingBackend, LibaioBackend)):
            _hook_close(loop, b)
        _last = (loop, b)
    return b


def _forget(loop: asyncio.AbstractEventLoop) -> None:
    """The loop's backend is gone (the loop closes): drop it from the lookups."""
    global _last
    _backends.pop(loop, None)
    if _last[0] is loop:
        _last = (None, None)


def _hook_close(loop: asyncio.AbstractEventLoop, b: RingBackend | LibaioBackend) -> None:
    """Close the ring when the loop closes (cancelling and waiting for what is in flight)."""
    orig = loop.close

    def close() -> None:
        b.shutdown()
        _forget(loop)
        orig()

    run = loop.run_forever

    def run_forever() -> None:
        # run from another thread than its SINGLE_ISSUER ring's: a ring for this one
        # first (what the old one had in flight fails, saying why, instead of hanging)
        if (
            isinstance(b, RingBackend)
            and b.single_issuer
            and not b.shared
            and not b.closed
            and threading.get_ident() != b.thread
        ):
            b._follow_thread()
        run()

    # uvloop's Loop has no __dict__: there the finalizer below does the job (and a loop
    # moved to another thread follows with its next flush — what was in flight before
    # the move waits until then).
    with contextlib.suppress(AttributeError):
        loop.close = close  # type: ignore[method-assign]
        loop.run_forever = run_forever  # type: ignore[method-assign]
    weakref.finalize(loop, b.shutdown)
