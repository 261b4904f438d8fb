"""Async file objects with aiofiles' (and the stdlib's) method names and behaviour."""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import errno
import io
import locale
import os
import stat
import warnings
from collections.abc import AsyncIterator, Iterable
from typing import Any, Generic, TypeVar

from .._native import AlignedBuffer, dio_alignment, is_local_fs, pread_nowait
from ._backend import EARLY_SUBMIT as EARLY
from ._backend import RingBackend, get_backend

T = TypeVar("T", bytes, str)
CHUNK = 64 * 1024


_SEEK_OTHER = frozenset(getattr(os, n) for n in ("SEEK_DATA", "SEEK_HOLE") if hasattr(os, n))


def bad_range(offset: int, n: int | None = None) -> ValueError:
    """The error for a negative offset or length (the ring would read a negative offset
    as "the current file position": never let one through)."""
    if offset < 0:
        return ValueError(f"offset must be >= 0 (got {offset})")
    return ValueError(f"length must be >= 0 (got {n})")


def _explain_direct(e: OSError, n: int, offset: int) -> OSError:
    if e.errno != errno.EINVAL or (e.strerror and "align" in e.strerror):
        return e
    return OSError(
        errno.EINVAL,
        f"O_DIRECT I/O of {n} bytes at offset {offset} failed with "
        "EINVAL: O_DIRECT needs aligned I/O — a buffer aligned to the device's "
        "logical block (uringkit.aligned_buffer), and lengths and offsets that are "
        "multiples of it (usually 512 or 4096)",
    )


def _give_back(pool: list[Any], buf: Any) -> None:
    """Return an O_DIRECT read's buffer to its pool (kept to 256 buffers of up to
    1 MiB: a whole-file read's buffer is not kept)."""
    if len(pool) < 256 and len(buf) <= 1 << 20:
        pool.append(buf)


def _closes_inline(fd: int, regular: bool | None = None) -> bool:
    """A regular file on a local filesystem (ext2/3/4, xfs, btrfs, tmpfs): no ->flush on
    close. FUSE, NFS, CIFS and the like talk to a server on close: those go through the
    ring. `regular`: S_ISREG of the fd if known already."""
    try:
        if regular is None:
            regular = stat.S_ISREG(os.fstat(fd).st_mode)
        return regular and is_local_fs(fd)
    except OSError:
        return False


class _Lines(Generic[T]):
    """readlines() and `async for line in f` on top of readline()."""

    async def readline(self, size: int | None = -1) -> T:
        raise NotImplementedError

    async def readlines(self, hint: int = -1) -> list[T]:
        lines: list[T] = []
        total = 0
        while True:
            line = await self.readline()
            if not line:
                break
            lines.append(line)
            total += len(line)
            if 0 < hint <= total:
                break
        return lines

    def __aiter__(self) -> AsyncIterator[T]:
        return self

    async def __anext__(self) -> T:
        line = await self.readline()
        if not line:
            raise StopAsyncIteration
        return line


class AsyncFile(_Lines[bytes]):
    """A binary file (`open(..., 'rb'|'wb'|'ab'|'r+b'|…)`).

    Positioned like a stdlib file: read/write advance the position, seek/tell move and
    report it. Small writes gather in a write buffer (`buffering`: 64 KiB by default, 0
    writes every call through) that goes to the kernel on `flush()`, `close()`, a seek, a
    read or when it fills, as io.BufferedWriter's does.

    The file is not tied to the event loop that opened it: each operation runs on the
    running loop's ring (or thread pool), so a file opened under one `asyncio.run()` can
    be used, flushed and closed under the next.
    """

    def __init__(
        self,
        backend: Any,
        fd: int,
        name: Any,
        mode: str,
        *,
        readable: bool,
        writable: bool,
        append: bool,
        closefd: bool,
        direct: bool,
        buffer_size: int = 0,
        regular: bool | None = None,
    ) -> None:
        #: the backend of the loop this file was last used on (_b follows the running
        #: loop, as aiofiles' files do: a file opened under one asyncio.run() works under
        #: the next)
        self._backend = backend
        #: S_ISREG of the fd, when the opener knows it (None: found out when needed)
        self._regular = regular
        self._fd = fd
        self.name = name
        self.mode = mode
        self._readable = readable
        self._writable = writable
        self._append = append
        self._closefd = closefd
        self._direct = direct
        #: a path removed when the file is closed (aio.tempfile.NamedTemporaryFile)
        self.unlink_on_close: str | None = None
        # Pipes, FIFOs, sockets and ttys cannot be read by offset: they are streams, read
        # and written at "the current position" (offset -1); _pos then only counts bytes.
        self._stream = False
        try:
            self._pos = os.lseek(fd, 0, os.SEEK_END if append else os.SEEK_CUR)
        except OSError as e:
            if e.errno != errno.ESPIPE:
                raise
            self._stream = True
            self._pos = 0
        self._buf = b""  # read-ahead for readline/iteration
        self._pool: dict[int, list[AlignedBuffer]] = {}
        self._dio_align = 0  # O_DIRECT offset/length alignment, found on first use
        self._buf_at = 0
        # Write buffer (regular files): small writes gather here and go to the kernel in
        # one write of up to `buffer_size` bytes at `_wat`; `_pos` already counts them.
        self._wsize = 0 if self._stream or direct else buffer_size
        self._wbuf = bytearray()
        self._wat = 0
        self.closed = False

    # ----- plumbing ------------------------------------------------------------------------

    @property
    def _b(self) -> Any:
        """The running loop's backend: the one the file was opened with while it runs on
        that loop, else the new loop's (its fd is a plain descriptor, usable from any)."""
        b = self._backend
        if b.loop is not asyncio.get_running_loop():
            b = self._backend = get_backend(self._direct)
        return b

    def _check(self, want: str | None = None) -> None:
        if self.closed:
            raise ValueError("I/O operation on closed file.")
        if want == "r" and not self._readable:
            raise io.UnsupportedOperation("not readable")
        if want == "w" and not self._writable:
            raise io.UnsupportedOperation("not writable")

    def _at(self, pos: int) -> int:
        """The offset to pass to the kernel for file position `pos`."""
        return -1 if self._stream else pos

    def _no_stream(self) -> None:
        if self._stream:
            raise OSError(errno.ESPIPE, "Illegal seek")

    async def _flush_w(self) -> None:
        """Write out the write buffer (the caller checked it is not empty)."""
        data, at = self._wbuf, self._wat
        self._wbuf = bytearray()
        try:
            await self._pwrite(data, -1 if self._append else at)
        except asyncio.CancelledError:
            raise  # the write was cancelled in flight: like a cancelled write(), unknown
        except BaseException:
            if not self._wbuf:  # keep what was not written, as io.BufferedWriter does
                # (a copy: the failed write's views of `data` may still be alive)
                self._wbuf, self._wat = bytearray(data), at
            raise
        if self._append:
            self._pos = os.lseek(self._fd, 0, os.SEEK_END) + len(self._wbuf)

    def _named(self, e: OSError) -> OSError:
        """`e` with the file's name, as the stdlib's errors carry it (ENOSPC, EIO…)."""
        if e.filename is not None or not isinstance(self.name, (str, bytes, os.PathLike)):
            return e
        return OSError(e.errno, e.strerror, os.fspath(self.name))

    async def _pwrite(self, data: Any, offset: int) -> int:
        try:
            return int(await self._b.pwrite(self._fd, data, offset))
        except OSError as e:
            raise self._named(e) from None

    async def _fsync(self, datasync: bool) -> None:
        try:
            await self._b.fsync(self._fd, datasync)
        except OSError as e:
            raise self._named(e) from None

    async def _pread(self, n: int, offset: int) -> bytes:
        if self._direct and offset >= 0:
            # O_DIRECT: aligned memory, and the covering aligned range when (n, offset)
            # is not block-aligned (read(), readline, iteration at any position)
            return await self.read_at(n, offset)
        try:
            data: bytes = await self._b.pread(self._fd, n, offset, not self._direct)
        except OSError as e:
            raise self._named(e) from None
        return data

    def _drop_buf(self) -> None:
        self._buf = b""
        self._buf_at = self._pos

    def _from_buf(self, n: int) -> bytes:
        """Take up to n bytes at the position from the read-ahead buffer."""
        start = self._pos - self._buf_at
        if not self._buf or start < 0 or start >= len(self._buf):
            return b""
        chunk = self._buf[start : start + n] if n >= 0 else self._buf[start:]
        self._pos += len(chunk)
        return chunk

    def fileno(self) -> int:
        self._check()
        return self._fd

    def readable(self) -> bool:
        self._check()
        return self._readable

    # aiofiles' split for binary files: readable() and fileno() plain, these awaitable
    async def writable(self) -> bool:
        self._check()
        return self._writable

    async def seekable(self) -> bool:
        self._check()
        return not self._stream

    async def isatty(self) -> bool:
        self._check()
        return os.isatty(self._fd)

    # ----- reading -------------------------------------------------------------------------

    async def read(self, size: int | None = -1) -> bytes:
        """Read up to `size` bytes (all to EOF if negative or None)."""
        self._check("r")
        if self._wbuf:
            await self._flush_w()
        if size is None or size < 0:
            head = self._from_buf(-1)
            rest = 0 if self._stream else max(0, os.fstat(self._fd).st_size - self._pos)
            parts = [head]
            while True:
                # The size fstat reported first: a cached file is then one inline read,
                # and getting all of it ends the read (as if the file grew, if it did,
                # just after it — no second read to confirm the end). Otherwise (size 0
                # as in /proc, a stream) chunks until an empty read.
                want = rest or CHUNK
                chunk = await self._pread(want, self._at(self._pos))
                if not chunk:
                    break
                parts.append(chunk)
                self._pos += len(chunk)
                if rest and not self._stream:
                    break  # all of it — or less: the file shrank (reads are completed)
                rest = 0
            return b"".join(parts) if len(parts) > 2 or head else parts[-1]
        head = self._from_buf(size)
        if len(head) == size:
            return head
        # claim the range before awaiting, so concurrent reads get consecutive pieces
        at, want = self._pos, size - len(head)
        self._pos = at + want
        try:
            data = await self._pread(want, self._at(at))
        except BaseException:
            if self._pos == at + want:
                self._pos = at
            raise
        if len(data) < want and self._pos == at + want:
            self._pos = at + len(data)
        return head + data if head else data

    async def read1(self, size: int = -1) -> bytes:
        return await self.read(size)

    async def peek(self, size: int = 0) -> bytes:
        """Bytes from the current position without moving it (io.BufferedReader.peek):
        what the read-ahead buffer holds there, filling it first if empty; b"" only at
        end of file. `size` is a hint, as in the stdlib."""
        self._check("r")
        if self._wbuf:
            await self._flush_w()
        start = self._pos - self._buf_at
        if not (0 <= start < len(self._buf)):
            if not await self._fill():
                return b""
            start = self._pos - self._buf_at
        return self._buf[start:]

    async def readinto(self, b: Any) -> int:
        """Read into a writable buffer; returns the number of bytes read."""
        self._check("r")
        if self._wbuf:
            await self._flush_w()
        mv = memoryview(b).cast("B")
        head = self._from_buf(len(mv))
        mv[: len(head)] = head
        if len(head) == len(mv):
            return len(head)
        if self._direct and not self._stream:
            # (the caller's memory need not be aligned: read aligned, then copy)
            data = await self.read_at(len(mv) - len(head), self._pos)
            mv[len(head) : len(head) + len(data)] = data
            self._pos += len(data)
            return len(head) + len(data)
        try:
            n: int = await self._b.preadinto(
                self._fd, mv[len(head) :], self._at(self._pos), not self._direct
            )
        except OSError as e:
            raise self._named(e) from None
        self._pos += n
        return len(head) + n

    async def readinto1(self, b: Any) -> int:
        return await self.readinto(b)

    async def _fill(self) -> bool:
        """Extend the read-ahead buffer; False at EOF."""
        if not self._buf or self._pos - self._buf_at >= len(self._buf) or self._pos < self._buf_at:
            self._buf = b""
            self._buf_at = self._pos
        at = self._buf_at + len(self._buf)
        data = await self._pread(CHUNK, self._at(at))
        if not data:
            return False
        start = self._pos - self._buf_at
        self._buf = self._buf[start:] + data
        self._buf_at = self._pos
        return True

    async def readline(self, size: int | None = -1) -> bytes:
        if size == 0:
            return b""  # (as io.IOBase.readline: before any check, even on a closed file)
        self._check("r")
        if self._wbuf:
            await self._flush_w()
        limit = -1 if size is None else size
        while True:
            start = self._pos - self._buf_at
            if self._buf and 0 <= start < len(self._buf):
                i = self._buf.find(b"\n", start)
                end = len(self._buf) if i < 0 else i + 1
                if limit >= 0:
                    end = min(end, start + limit)
                if i >= 0 or (limit >= 0 and end - start >= limit):
                    return self._from_buf(end - start)
            if not await self._fill():
                return self._from_buf(limit)

    # ----- writing -------------------------------------------------------------------------

    async def write(self, b: Any) -> int:
        """Write all of `b`; returns len(b). Writes smaller than the buffer are gathered
        in memory (like the stdlib's buffered files) and reach the kernel on flush(),
        close(), a seek, a read, or when the buffer fills; larger ones are written at
        once, short writes completed."""
        self._check("w")
        if isinstance(b, str):
            raise TypeError(f"a bytes-like object is required, not '{type(b).__name__}'")
        mv = memoryview(b).cast("B")
        n = len(mv)
        if n == 0:
            # nothing to write: the position stays — also in append mode, where the
            # kernel moves it to the end only for a write that writes something
            return 0
        self._drop_buf()
        if n < self._wsize:
            if len(self._wbuf) + n > self._wsize:
                await self._flush_w()
            if not self._wbuf:
                self._wat = self._pos
            self._wbuf += mv
            self._pos += n
            return n
        if self._wbuf:
            await self._flush_w()
        if self._stream or self._append:
            n = await self._pwrite(mv, -1)
            self._pos = self._pos + n if self._stream else os.lseek(self._fd, 0, os.SEEK_CUR)
            return n
        # Claim the range before awaiting: another task's write meanwhile goes after it
        # (as the stdlib's lock-protected buffered writer would order them).
        at = self._pos
        self._pos = at + n
        try:
            return await self._pwrite(mv, at)
        except BaseException:
            if self._pos == at + n:  # nothing claimed after us: the position stays
                self._pos = at
            raise

    async def writelines(self, lines: Iterable[Any]) -> None:
        for line in lines:
            await self.write(line)

    # ----- position ------------------------------------------------------------------------

    async def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        self._check()
        self._no_stream()
        if self._wbuf:
            await self._flush_w()
        if whence == os.SEEK_SET:
            if offset < 0:
                raise OSError(errno.EINVAL, "Invalid argument")
            new = offset
        elif whence == os.SEEK_CUR:
            new = self._pos + offset
        elif whence == os.SEEK_END:
            new = os.fstat(self._fd).st_size + offset
        elif whence in _SEEK_OTHER:  # SEEK_DATA, SEEK_HOLE
            new = os.lseek(self._fd, offset, whence)
        else:
            raise ValueError(f"whence value {whence} unsupported")
        if new < 0:
            raise OSError(errno.EINVAL, "Invalid argument")
        self._pos = new
        return new

    async def tell(self) -> int:
        self._check()
        self._no_stream()
        return self._pos

    async def truncate(self, size: int | None = None) -> int:
        self._check("w")
        if self._wbuf:
            await self._flush_w()
        n = self._pos if size is None else size
        try:
            await self._b.ftruncate(self._fd, n)
        except OSError as e:
            raise self._named(e) from None
        self._drop_buf()
        return n

    async def flush(self) -> None:
        """Write out what write() gathered in memory (a no-op when nothing is)."""
        self._check()
        if self._wbuf:
            await self._flush_w()

    # ----- durability and positional I/O ---------------------------------------------------

    async def fsync(self) -> None:
        self._check()
        if self._wbuf:
            await self._flush_w()
        await self._fsync(False)

    async def fdatasync(self) -> None:
        self._check()
        if self._wbuf:
            await self._flush_w()
        await self._fsync(True)

    async def fallocate(self, length: int, offset: int = 0, mode: int = 0) -> None:
        self._check("w")
        if self._wbuf:
            await self._flush_w()
        try:
            await self._b.fallocate(self._fd, mode, offset, length)
        except OSError as e:
            raise self._named(e) from None

    async def read_at(self, n: int, offset: int) -> bytes:
        """pread: `n` bytes at `offset` (fewer only at EOF); the position does not move."""
        if self.closed or not self._readable:
            self._check("r")
        if offset < 0 or n < 0:
            raise bad_range(offset, n)
        if self._wbuf:
            await self._flush_w()
        if not self._direct:
            try:
                if n > 0:
                    # a page-cache hit completes right here (the backend's first step,
                    # inlined: the hot path of Task-per-read code)
                    hit = pread_nowait(self._fd, n, offset)
                    if hit is not None and (len(hit) == n or not hit):
                        return hit
                return await self._b.pread(self._fd, n, offset, False)  # type: ignore[no-any-return]
            except OSError as e:
                raise self._named(e) from None
        a = self._dio_align or self._find_dio_align()
        if offset % a or n % a:
            return await self._read_unaligned(n, offset, a)
        # The hot path of direct-I/O servers, kept in this one coroutine (a second one
        # per read cost 5-8 % of the CPU per read): on the ring, a buffer of its read
        # pool, the bytes copied out natively by dispatch.
        b = self._b
        if type(b) is RingBackend and not b.closed:
            if not b.pool_tried:
                b.register_pool()
            fut = b.ring.read_bytes_future(self._fd, n, offset, b.new_future, b.fast, EARLY)
            if fut is not None:
                if not b.flush_pending:
                    b.flush_pending = True
                    b.loop.call_soon(b._flush)
                try:
                    r = await fut
                except asyncio.CancelledError:
                    b.cancel_read(fut)  # (the pool buffer comes back with the completion)
                    raise
                if type(r) is bytes and (len(r) == n or not r):
                    return r
                return await self._direct_rest(r, n, offset)
        return await self._read_direct(n, offset)

    def _find_dio_align(self) -> int:
        """The offset/length alignment O_DIRECT needs on this file (statx's
        dio_offset_align where the kernel reports it, else 512)."""
        al = dio_alignment(self._fd)
        self._dio_align = al[1] if al and al[1] > 0 else 512
        return self._dio_align

    async def _read_unaligned(self, n: int, offset: int, a: int) -> bytes:
        """An O_DIRECT read of a range that is not block-aligned: the aligned range that
        covers it is read and the asked-for part returned (RocksDB's direct reads do the
        same), so any (n, offset) works, as on a buffered file."""
        if n == 0:
            return b""
        start = offset - offset % a
        end = -(-(offset + n) // a) * a
        data = await self.read_at(end - start, start)
        return data[offset - start : offset - start + n]

    async def _direct_rest(self, r: Any, n: int, offset: int) -> bytes:
        """A direct read from the ring's pool that came back short (`r` the bytes) or
        failed (`r` the Completion)."""
        if type(r) is bytes:
            # short: at end of file (a direct read stops there, mid-block), or continue
            # with the next blocks
            end = offset + len(r)
            if end % (self._dio_align or 512) or os.fstat(self._fd).st_size <= end:
                return r
            return r + await self.read_at(n - len(r), end)
        failed = OSError(-r.res, r.message or os.strerror(-r.res))
        raise _explain_direct(failed, n, offset) from None

    async def _read_direct(self, n: int, offset: int) -> bytes:
        """`n` bytes at `offset` of an O_DIRECT file, both block-aligned, without the
        ring's read pool."""
        b = self._b
        # no pool buffer (none free, larger reads, another engine): an aligned buffer
        # of this file's own pool, one read through the backend, the data copied out
        pool = self._pool.get(n)
        if pool is None:
            pool = self._pool[n] = []
        buf = pool.pop() if pool else AlignedBuffer(max(n, 1))
        try:
            got = await b.read_direct(self._fd, buf, n, offset)
        except OSError as e:
            _give_back(pool, buf)  # the read is over
            raise _explain_direct(e, n, offset) from None
        data = bytes(buf) if got == len(buf) else bytes(memoryview(buf)[:got])
        _give_back(pool, buf)
        return data

    async def readinto_at(self, buf: Any, offset: int) -> int:
        """preadv into `buf`: the number of bytes read; the position does not move.
        On an O_DIRECT file, aligned memory, length and offset are read into directly;
        anything else goes through an aligned buffer (then copied), as read_at does."""
        self._check("r")
        if offset < 0:
            raise bad_range(offset)
        if self._wbuf:
            await self._flush_w()
        try:
            return await self._b.preadinto(  # type: ignore[no-any-return]
                self._fd, buf, offset, nowait=not self._direct
            )
        except OSError as e:
            if not self._direct:
                raise self._named(e) from None
            if e.errno != errno.EINVAL:
                raise _explain_direct(e, len(memoryview(buf)), offset) from None
        # O_DIRECT refused the caller's memory or range: read aligned, copy
        mv = memoryview(buf).cast("B")
        data = await self.read_at(len(mv), offset)
        mv[: len(data)] = data
        return len(data)

    async def write_at(self, data: Any, offset: int) -> int:
        """pwrite: all of `data` at `offset` (or raise); the position does not move."""
        self._check("w")
        if offset < 0:
            raise bad_range(offset)
        self._drop_buf()
        if self._wbuf:
            await self._flush_w()
        try:
            return await self._b.pwrite(self._fd, data, offset)  # type: ignore[no-any-return]
        except OSError as e:
            if not self._direct:
                raise self._named(e) from None
            raise _explain_direct(e, len(memoryview(data)), offset) from None

    # ----- lifecycle -----------------------------------------------------------------------

    async def close(self) -> None:
        if self.closed:
            return
        try:
            if self._wbuf:
                await self._flush_w()
        finally:
            self._wbuf = bytearray()
            self.closed = True
            try:
                if self._closefd:
                    await self._close_fd()
            finally:
                if self.unlink_on_close is not None:
                    with contextlib.suppress(FileNotFoundError):
                        await self._b.run(os.unlink, self.unlink_on_close)

    async def _close_fd(self) -> None:
        if not self._writable and not self._stream and _closes_inline(self._fd, self._regular):
            # A read-only file on a local filesystem: close cannot block (no
            # ->flush to call; io_uring would close it inline too), so skip the
            # loop round trip.
            os.close(self._fd)
            return
        await self._b.close(self._fd)

    async def __aenter__(self) -> AsyncFile:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __del__(self) -> None:
        # Dropped without close(): write out what is buffered and close, synchronously,
        # as the stdlib's files do (and warn like them — closing even when the warning is
        # made an error, as io does).
        if getattr(self, "closed", True):
            return
        self.closed = True
        try:
            if self._closefd:  # (closefd=False: not ours to close, nor to warn about)
                warnings.warn(f"unclosed file {self!r}", ResourceWarning, stacklevel=2, source=self)
        finally:
            self._close_now()

    def _close_now(self) -> None:
        """Flush the write buffer and close the fd with plain system calls."""
        self.closed = True
        try:
            if self._wbuf:
                data = memoryview(self._wbuf)
                at = self._wat
                while data:
                    n = os.write(self._fd, data) if self._append else os.pwrite(self._fd, data, at)
                    data, at = data[n:], at + n
        except OSError:
            pass
        finally:
            if self._closefd:
                with contextlib.suppress(OSError):
                    os.close(self._fd)
            if getattr(self, "unlink_on_close", None) is not None:
                with contextlib.suppress(OSError):
                    os.unlink(self.unlink_on_close)  # type: ignore[arg-type]

    def __repr__(self) -> str:
        return f"<uringkit.aio.AsyncFile name={self.name!r} mode={self.mode!r}>"


class AsyncTextFile(_Lines[str]):
    """A text file over an `AsyncFile`: decoding, universal newlines, like io.TextIOWrapper.

    `tell()` returns the byte position of the next character (valid for `seek`), as the
    stdlib does when the decoder holds no pending state.
    """

    def __init__(
        self,
        raw: AsyncFile,
        encoding: str | None,
        errors: str | None,
        newline: str | None,
        *,
        line_buffering: bool = False,
        mode: str | None = None,
    ) -> None:
        if newline not in (None, "", "\n", "\r", "\r\n"):
            raise ValueError(f"illegal newline value: {newline!r}")
        self.buffer = raw
        # as io.TextIOWrapper from open(): the mode exactly as it was given
        self._mode = mode if mode is not None else raw.mode.replace("b", "")
        self.line_buffering = line_buffering
        self.encoding = encoding or locale.getpreferredencoding(False)
        codecs.lookup(self.encoding)
        self.errors = errors or "strict"
        self.newlines = None
        self._newline = newline
        self._decoder = codecs.getincrementaldecoder(self.encoding)(self.errors)
        self._text = ""  # decoded, untranslated, not yet returned
        self._eof = False

    @property
    def name(self) -> Any:
        return self.buffer.name

    @property
    def mode(self) -> str:
        return self._mode

    @property
    def closed(self) -> bool:
        return self.buffer.closed

    def fileno(self) -> int:
        return self.buffer.fileno()

    # awaitable, as in aiofiles' text files
    async def readable(self) -> bool:
        return self.buffer.readable()

    async def writable(self) -> bool:
        return await self.buffer.writable()

    async def seekable(self) -> bool:
        return await self.buffer.seekable()

    async def isatty(self) -> bool:
        return await self.buffer.isatty()

    def _reset(self) -> None:
        self._decoder.reset()
        self._text = ""
        self._eof = False

    async def _more(self) -> bool:
        data = await self.buffer.read(CHUNK)
        if not data:
            tail = self._decoder.decode(b"", final=True)
            self._text += tail
            self._eof = True
            return bool(tail)
        self._text += self._decoder.decode(data)
        return True

    def _translate(self, s: str) -> str:
        if self._newline is None:
            return s.replace("\r\n", "\n").replace("\r", "\n")
        return s

    def _line_end(self, s: str, start: int = 0) -> int:
        """Index just past the first line ending in s, or -1 (a trailing '\\r' is not
        decided until more text arrives)."""
        nl = self._newline
        if nl in (None, ""):
            i_n = s.find("\n", start)
            i_r = s.find("\r", start)
            if i_r >= 0 and (i_n < 0 or i_r < i_n):
                if i_r + 1 < len(s):
                    return i_r + 2 if s[i_r + 1] == "\n" else i_r + 1
                return -1 if not self._eof else i_r + 1
            return i_n + 1 if i_n >= 0 else -1
        i = s.find(nl, start)
        return i + len(nl) if i >= 0 else -1

    async def read(self, size: int | None = -1) -> str:
        self.buffer._check("r")
        if size == 0:
            return ""  # (as io.TextIOWrapper: nothing read, nothing decoded)
        if size is None or size < 0:
            while await self._more() and not self._eof:
                pass
            while not self._eof:
                await self._more()
            s, self._text = self._text, ""
            return self._translate(s)
        while len(self._translate(self._text)) < size + 1 and not self._eof:
            await self._more()
        # take enough raw text to produce `size` translated characters
        out = []
        count = 0
        i = 0
        t = self._text
        while i < len(t) and count < size:
            if self._newline is None and t[i] == "\r":
                if i + 1 < len(t) and t[i + 1] == "\n":
                    out.append("\n")
                    i += 2
                    count += 1
                    continue
                out.append("\n")
            else:
                out.append(t[i])
            i += 1
            count += 1
        self._text = t[i:]
        return "".join(out)

    async def readline(self, size: int | None = -1) -> str:
        self.buffer._check("r")
        limit = -1 if size is None else size
        while True:
            end = self._line_end(self._text)
            if end >= 0:
                if 0 <= limit < end:
                    end = limit
                line, self._text = self._text[:end], self._text[end:]
                return self._translate(line)
            if 0 <= limit <= len(self._text):
                line, self._text = self._text[:limit], self._text[limit:]
                return self._translate(line)
            if self._eof or not await self._more():
                if self._eof:
                    end = self._line_end(self._text)
                    if end >= 0:
                        continue
                line, self._text = self._text, ""
                return self._translate(line)

    async def write(self, s: str) -> int:
        if not isinstance(s, str):
            raise TypeError(f"write() argument must be str, not {type(s).__name__}")
        self.buffer._check("w")
        text = s
        if self._newline is None and os.linesep != "\n":
            text = text.replace("\n", os.linesep)
        elif self._newline in ("\r", "\r\n"):
            text = text.replace("\n", self._newline)
        if self._text:
            # writing after reading: write at the logical position
            await self.seek(await self.tell())
        await self.buffer.write(text.encode(self.encoding, self.errors))
        if self.line_buffering and ("\n" in s or "\r" in s):
            await self.buffer.flush()
        return len(s)

    async def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            await self.write(line)

    async def tell(self) -> int:
        self.buffer._check()
        if self.buffer._wbuf:
            # as io.TextIOWrapper.tell(), which flushes first: in append mode the
            # position is then where the writes went, the end of the file
            await self.buffer._flush_w()
        pending = self._decoder.getstate()[0]
        return (
            (await self.buffer.tell())
            - len(pending)
            - len(self._text.encode(self.encoding, self.errors))
        )

    async def seek(self, cookie: int, whence: int = os.SEEK_SET) -> int:
        self.buffer._check()
        if whence == os.SEEK_CUR:
            if cookie != 0:
                raise io.UnsupportedOperation("can't do nonzero cur-relative seeks")
            cookie = await self.tell()
            whence = os.SEEK_SET
        elif whence == os.SEEK_END:
            if cookie != 0:
                raise io.UnsupportedOperation("can't do nonzero end-relative seeks")
        elif cookie < 0:
            raise ValueError(f"negative seek position {cookie}")
        self._reset()
        return await self.buffer.seek(cookie, whence)

    async def truncate(self, size: int | None = None) -> int:
        if size is None:
            size = await self.tell()
        return await self.buffer.truncate(size)

    async def flush(self) -> None:
        await self.buffer.flush()

    async def fsync(self) -> None:
        await self.buffer.fsync()

    async def fdatasync(self) -> None:
        await self.buffer.fdatasync()

    async def close(self) -> None:
        await self.buffer.close()

    async def __aenter__(self) -> AsyncTextFile:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return (
            f"<uringkit.aio.AsyncTextFile name={self.name!r} mode={self.mode!r} "
            f"encoding={self.encoding!r}>"
        )
