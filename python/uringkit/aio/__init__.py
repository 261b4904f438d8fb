"""Truly asynchronous files for asyncio — a drop-in for aiofiles.

    from uringkit import aio
    async with aio.open("data.bin", "rb") as f:
        head = await f.read(4096)
        async for line in f: ...
    await aio.os.rename("a", "b")
    blocks = await aio.read_many("data.bin", [(0, 4096), (1 << 20, 4096)])
    data = await aio.sock_recv(conn, 65536)            # sockets too: loop.sock_*'s API

One io_uring per event loop (created on first use), woken through an eventfd — on
uringkit.loop, the loop's own ring, reaped by its select; everything queued during one
loop iteration is submitted in one system call. When io_uring is
blocked (or `URINGKIT_ENGINE=threads`), the same API runs on the loop's thread pool.
Works on asyncio's default loop and on uvloop.
"""

from __future__ import annotations

import fcntl
import functools
import io
import os as _os
import stat as _stat
from collections.abc import Generator, Sequence
from typing import Any

from .._native import AlignedBuffer
from . import os, tempfile
from ._backend import get_backend
from ._file import AsyncFile, AsyncTextFile, _explain_direct, bad_range
from .sock import (
    sock_accept,
    sock_connect,
    sock_recv,
    sock_recv_into,
    sock_recvfrom,
    sock_recvfrom_into,
    sock_sendall,
    sock_sendto,
)

__all__ = [
    "AsyncFile",
    "AsyncTextFile",
    "OpenContext",
    "backend_name",
    "open",
    "os",
    "tempfile",
    "read_many",
    "write_many",
    "sock_accept",
    "sock_connect",
    "sock_recv",
    "sock_recv_into",
    "sock_recvfrom",
    "sock_recvfrom_into",
    "sock_sendall",
    "sock_sendto",
]


#: Write buffer of files opened with the default `buffering=-1`: bigger than the
#: stdlib's (st_blksize) because each flush is one asynchronous write — on filesystems
#: without non-blocking buffered writes (ext4) a trip through an io_uring worker.
WRITE_BUFFER = 64 * 1024


def _flags(mode: str) -> tuple[int, bool, bool, bool, bool]:
    """(flags, readable, writable, append, binary) for a mode string, validated like open()."""
    if not isinstance(mode, str):
        raise TypeError(f"open() argument 'mode' must be str, not {type(mode).__name__}")
    return _parse_mode(str(mode))


@functools.lru_cache(maxsize=64)  # (a program opens files in a handful of modes)
def _parse_mode(mode: str) -> tuple[int, bool, bool, bool, bool]:
    modes = set(mode)
    if modes - set("axrwb+t") or len(mode) > len(modes):
        raise ValueError(f"invalid mode: '{mode}'")
    creating, reading, writing, appending = ("x" in modes, "r" in modes, "w" in modes, "a" in modes)
    updating = "+" in modes
    text, binary = "t" in modes, "b" in modes
    if text and binary:
        raise ValueError("can't have text and binary mode at once")
    if creating + reading + writing + appending > 1:
        raise ValueError("must have exactly one of create/read/write/append mode")
    if not (creating or reading or writing or appending):
        raise ValueError(
            "Must have exactly one of create/read/write/append mode and at most one plus"
        )
    if creating:
        flags = _os.O_EXCL | _os.O_CREAT
    elif reading:
        flags = 0
    elif writing:
        flags = _os.O_CREAT | _os.O_TRUNC
    else:
        flags = _os.O_APPEND | _os.O_CREAT
    readable = reading or updating
    writable = creating or writing or appending or updating
    if updating:
        flags |= _os.O_RDWR
    elif readable:
        flags |= _os.O_RDONLY
    else:
        flags |= _os.O_WRONLY
    return flags | _os.O_CLOEXEC, readable, writable, appending, binary


class OpenContext:
    """What `open` returns, as `aiofiles.open` does: `await` it for the file, or use it
    directly with `async with` (the file is closed on exit)."""

    __slots__ = ("_args", "_direct", "_file")

    def __init__(self, args: tuple[Any, ...], direct: bool) -> None:
        self._args = args
        self._direct = direct
        self._file: Any = None

    def __await__(self) -> Generator[Any, None, Any]:
        return _open(*self._args, direct=self._direct).__await__()

    async def __aenter__(self) -> Any:
        self._file = await _open(*self._args, direct=self._direct)
        return self._file

    async def __aexit__(self, *exc: object) -> None:
        await self._file.close()


def open(  # noqa: A001 - the point is to shadow builtins.open
    file: Any,
    mode: str = "r",
    buffering: int = -1,
    encoding: str | None = None,
    errors: str | None = None,
    newline: str | None = None,
    closefd: bool = True,
    opener: Any = None,
    *,
    direct: bool = False,
) -> OpenContext:
    """Open a file; same signature and behaviour as `aiofiles.open` / builtin `open`:
    `async with aio.open(path) as f:` or `f = await aio.open(path)`.

    The file is an `AsyncFile` (binary modes) or an `AsyncTextFile` (text modes), usable
    with `async with` and `async for`. Writes are buffered as with the stdlib: `buffering=-1`
    gathers small writes in a 64 KiB buffer written out on flush(), close(), a seek or a
    read (or when full), `0` writes through (binary only), `1` flushes at each newline
    (text only), `N` is an N-byte buffer; errors of a buffered write surface where the
    buffer is written, with the file's path.

    `direct=True` opens with O_DIRECT: I/O then bypasses the
    page cache and must be aligned (`read_at`/`readinto_at` with an aligned buffer, such as
    `uringkit.aligned_buffer`, and block-multiple offsets and lengths); misalignment raises
    EINVAL with the reason.
    """
    return OpenContext((file, mode, buffering, encoding, errors, newline, closefd, opener), direct)


async def _open(
    file: Any,
    mode: str,
    buffering: int,
    encoding: str | None,
    errors: str | None,
    newline: str | None,
    closefd: bool,
    opener: Any,
    *,
    direct: bool,
) -> Any:
    flags, readable, writable, append, binary = _flags(mode)
    if binary and (encoding is not None or errors is not None or newline is not None):
        what = (
            "encoding" if encoding is not None else ("errors" if errors is not None else "newline")
        )
        raise ValueError(f"binary mode doesn't take an {what} argument")
    if buffering == 0 and not binary:
        raise ValueError("can't have unbuffered text I/O")
    line_buffering = buffering == 1 and not binary
    if buffering == 1 and binary:
        import warnings

        warnings.warn(
            "line buffering (buffering=1) isn't supported in binary mode, the default "
            "buffer size will be used",
            RuntimeWarning,
            stacklevel=2,
        )
    buffer_size = WRITE_BUFFER if buffering < 0 or buffering == 1 else buffering
    if direct:
        flags |= _os.O_DIRECT
    backend = get_backend(direct=direct)
    if isinstance(file, int):
        fd = file
        name: Any = file
    else:
        if not closefd:
            raise ValueError("Cannot use closefd=False with file name")
        name = file
        path = _os.fspath(file)
        if opener is not None:
            fd = opener(path, flags)
            if not isinstance(fd, int) or fd < 0:
                raise ValueError(f"opener returned {fd}")
        else:
            fd = await backend.openat(path, flags, 0o666)
    try:
        st = _os.fstat(fd)
        if _stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(21, "Is a directory", str(name))
        raw = AsyncFile(
            backend,
            fd,
            name,
            _mode_name(mode),
            readable=readable,
            writable=writable,
            append=append,
            closefd=closefd,
            direct=direct,
            buffer_size=buffer_size,
            regular=_stat.S_ISREG(st.st_mode),
        )
    except BaseException:
        if closefd and not isinstance(file, int):
            _os.close(fd)
        raise
    if binary:
        return raw
    try:
        return AsyncTextFile(
            raw, encoding, errors, newline, line_buffering=line_buffering, mode=mode
        )
    except BaseException:
        await raw.close()  # (a bad newline or encoding: io.open closes the file it made too)
        raise


@functools.lru_cache(maxsize=64)
def _mode_name(mode: str) -> str:
    """The binary file's mode as the stdlib's FileIO spells it: 'rb', 'wb+', 'ab', 'xb+'
    (open(p, 'r+b').mode == 'rb+')."""
    base = next(c for c in mode if c in "rwax")
    return base + "b" + ("+" if "+" in mode else "")


async def read_many(file: Any, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
    """Read many (offset, length) ranges of one file in one batch of SQEs (RocksDB's
    MultiGet pattern); returns the data in request order, short reads completed (shorter
    only at end of file). `file` is a path, an fd, or an open aio file."""
    backend = get_backend()
    if type(file) is AsyncFile and not file._direct:
        return await backend.read_many(file.fileno(), ranges)  # type: ignore[no-any-return]
    if isinstance(file, (AsyncFile, AsyncTextFile)):
        return await _read_many_fd(backend, file.fileno(), ranges)
    if isinstance(file, int):
        return await _read_many_fd(backend, file, ranges)
    fd = await backend.openat(_os.fspath(file), _os.O_RDONLY | _os.O_CLOEXEC, 0)
    try:
        return await backend.read_many(fd, ranges)  # type: ignore[no-any-return]
    finally:
        await backend.close(fd)


async def _read_many_fd(backend: Any, fd: int, ranges: Sequence[tuple[int, int]]) -> list[bytes]:
    if not fcntl.fcntl(fd, fcntl.F_GETFL) & _os.O_DIRECT:
        return await backend.read_many(fd, ranges)  # type: ignore[no-any-return]
    for o, n in ranges:  # (the page-cache path checks them natively)
        if o < 0 or n < 0:
            raise bad_range(o, n)
    # O_DIRECT: no page cache to hit, so every range is one read into its own aligned
    # buffer, all in flight together (the disk sees the whole batch at once).
    ranges = list(ranges)
    # One aligned allocation for the batch, a page-aligned slot per range.
    slots = [0]
    for _, n in ranges:
        slots.append(slots[-1] + (n + 4095) // 4096 * 4096)
    mem = memoryview(AlignedBuffer(max(slots[-1], 1)))
    bufs = [mem[a : a + n] for a, (_, n) in zip(slots[:-1], ranges, strict=True)]
    try:
        got = await backend.read_into_many(fd, bufs, ranges)
    except OSError as e:
        bad = next(((o, n) for o, n in ranges if (o | n) % 512), ranges[0] if ranges else (0, 0))
        raise _explain_direct(e, bad[1], bad[0]) from None
    return [bytes(b[:g]) for b, g in zip(bufs, got, strict=True)]


async def write_many(file: Any, items: Sequence[tuple[int, Any]]) -> list[int]:
    """Write many (offset, data) pieces in one batch; each is written completely (or
    raises). Returns the byte counts in request order."""
    import asyncio

    for off, _ in items:
        if off < 0:
            raise bad_range(off)
    backend = get_backend()
    own = not isinstance(file, (int, AsyncFile, AsyncTextFile))
    if own:
        fd = await backend.openat(
            _os.fspath(file), _os.O_WRONLY | _os.O_CREAT | _os.O_CLOEXEC, 0o666
        )
    else:
        fd = file if isinstance(file, int) else file.fileno()
    try:
        return list(await asyncio.gather(*(backend.pwrite(fd, d, off) for off, d in items)))
    finally:
        if own:
            await backend.close(fd)


def backend_name() -> str:
    """'io_uring' or 'threads': what this event loop's file I/O runs on."""
    return str(get_backend().name)


_ = io  # (io.UnsupportedOperation is raised by the file objects)
