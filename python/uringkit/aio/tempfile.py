"""Temporary files and directories for asyncio, with `aiofiles.tempfile`'s names.

    async with aio.tempfile.NamedTemporaryFile("w+b") as f:   # removed on close
        await f.write(b"data"); await f.seek(0); await f.read()
    async with aio.tempfile.TemporaryDirectory() as path: ...  # removed on exit

The files are `uringkit.aio` files (I/O through the loop's ring); creating them and
removing a directory tree run on the backend's thread pool, as aiofiles does.
`SpooledTemporaryFile` keeps its data in memory (operations complete inline: there is
no I/O to wait for) until it grows past `max_size`, `rollover()` or `fileno()` is
called; from then on it is a `TemporaryFile` like the others.
"""

from __future__ import annotations

import io
import os as _os
import shutil
import tempfile as _tempfile
from collections.abc import Callable, Coroutine, Generator, Iterable
from typing import Any

from ._backend import get_backend
from ._file import _Lines

__all__ = ["NamedTemporaryFile", "SpooledTemporaryFile", "TemporaryDirectory", "TemporaryFile"]


class _Context:
    """Awaitable (the object) and an async context manager (closed/cleaned up on exit),
    as aiofiles' tempfile functions return."""

    __slots__ = ("_make", "_obj", "_enter")

    def __init__(
        self, make: Callable[[], Coroutine[Any, Any, Any]], enter: Callable[[Any], Any]
    ) -> None:
        self._make = make
        self._enter = enter
        self._obj: Any = None

    def __await__(self) -> Generator[Any, None, Any]:
        return self._make().__await__()

    async def __aenter__(self) -> Any:
        self._obj = await self._make()
        return self._enter(self._obj)

    async def __aexit__(self, *exc: object) -> None:
        o = self._obj
        await (o.cleanup() if isinstance(o, AsyncTemporaryDirectory) else o.close())


async def _wrap(
    fd: int,
    path: str | None,
    mode: str,
    buffering: int,
    encoding: str | None,
    newline: str | None,
    delete: bool,
) -> Any:
    from . import open as aio_open

    try:
        f = await aio_open(fd, mode, buffering, encoding, newline=newline)
    except BaseException:
        _os.close(fd)
        if path is not None and delete:
            _os.unlink(path)
        raise
    raw = f if "b" in mode else f.buffer
    if path is not None:
        raw.name = path
        if delete:
            raw.unlink_on_close = path
    return f


def TemporaryFile(  # noqa: N802 - aiofiles' (and tempfile's) name
    mode: str = "w+b",
    buffering: int = -1,
    encoding: str | None = None,
    newline: str | None = None,
    suffix: str | None = None,
    prefix: str | None = None,
    dir: str | None = None,  # noqa: A002
) -> _Context:
    """A file with no name (O_TMPFILE where the filesystem has it): gone when closed."""

    async def make() -> Any:
        def create() -> int:
            with _tempfile.TemporaryFile("w+b", 0, suffix=suffix, prefix=prefix, dir=dir) as f:
                return _os.dup(f.fileno())

        fd = await get_backend().run(create)
        return await _wrap(fd, None, mode, buffering, encoding, newline, False)

    return _Context(make, lambda f: f)


def NamedTemporaryFile(  # noqa: N802
    mode: str = "w+b",
    buffering: int = -1,
    encoding: str | None = None,
    newline: str | None = None,
    suffix: str | None = None,
    prefix: str | None = None,
    dir: str | None = None,  # noqa: A002
    delete: bool = True,
) -> _Context:
    """A file with a visible name (`f.name`), removed when it is closed if `delete`."""

    async def make() -> Any:
        fd, path = await get_backend().run(
            lambda: _tempfile.mkstemp(suffix=suffix, prefix=prefix, dir=dir)
        )
        return await _wrap(fd, path, mode, buffering, encoding, newline, delete)

    return _Context(make, lambda f: f)


class AsyncTemporaryDirectory:
    """A directory made by `TemporaryDirectory`; `await d.cleanup()` removes it."""

    def __init__(self, name: str) -> None:
        self.name = name

    async def cleanup(self) -> None:
        if _os.path.exists(self.name):
            await get_backend().run(shutil.rmtree, self.name)

    def __repr__(self) -> str:
        return f"<AsyncTemporaryDirectory {self.name!r}>"


def TemporaryDirectory(  # noqa: N802
    suffix: str | None = None,
    prefix: str | None = None,
    dir: str | None = None,  # noqa: A002
) -> _Context:
    """`async with TemporaryDirectory() as path:` — the path (a str); the directory and
    everything in it are removed on exit. Awaited, it gives the directory object."""

    async def make() -> AsyncTemporaryDirectory:
        path = await get_backend().run(
            lambda: _tempfile.mkdtemp(suffix=suffix, prefix=prefix, dir=dir)
        )
        return AsyncTemporaryDirectory(path)

    return _Context(make, lambda d: d.name)


class AsyncSpooledTemporaryFile(_Lines[Any]):
    """A temporary file held in memory until it grows past `max_size` (then, or on
    `rollover()` / `fileno()`, it becomes a `TemporaryFile` on disk) — the stdlib's
    `tempfile.SpooledTemporaryFile` with aiofiles' async methods. In memory, the methods
    complete inline (there is no I/O); rolled over, they are `uringkit.aio` file I/O."""

    def __init__(
        self,
        max_size: int,
        mode: str,
        buffering: int,
        encoding: str | None,
        newline: str | None,
        errors: str | None,
        suffix: str | None,
        prefix: str | None,
        dir: str | None,  # noqa: A002
    ) -> None:
        self._max_size = max_size
        self._args = (mode, buffering, encoding, newline, suffix, prefix, dir)
        self._mem: Any = (
            io.BytesIO()
            if "b" in mode
            else io.TextIOWrapper(io.BytesIO(), encoding=encoding, errors=errors, newline=newline)
        )
        self._disk: Any = None  # the TemporaryFile once rolled over
        self._mode = mode

    @property
    def _rolled(self) -> bool:
        return self._disk is not None

    @property
    def _file(self) -> Any:
        """The file now holding the data: in memory (an io object) or on disk."""
        return self._mem if self._disk is None else self._disk

    async def rollover(self) -> None:
        """Move the data to a file on disk (no-op once done); the position is kept."""
        if self._disk is not None:
            return
        mode, buffering, encoding, newline, suffix, prefix, dir_ = self._args
        disk = await TemporaryFile(mode, buffering, encoding, newline, suffix, prefix, dir_)
        mem = self._mem
        try:
            mem.flush()
            pos = mem.tell()
            raw_disk = disk if "b" in mode else disk.buffer
            await raw_disk.write((mem if "b" in mode else mem.buffer).getvalue())
            await raw_disk.flush()
            await disk.seek(pos)
        except BaseException:
            await disk.close()
            raise
        self._disk = disk
        self._mem = None
        mem.close()

    async def _check(self) -> None:
        if self._max_size and self._disk is None and self._mem.tell() > self._max_size:
            await self.rollover()

    async def write(self, s: Any) -> int:
        if self._disk is not None:
            return int(await self._disk.write(s))
        n = int(self._mem.write(s))
        await self._check()
        return n

    async def writelines(self, lines: Iterable[Any]) -> None:
        if self._disk is not None:
            await self._disk.writelines(lines)
            return
        self._mem.writelines(lines)
        await self._check()

    async def read(self, size: int = -1) -> Any:
        return await self._disk.read(size) if self._disk is not None else self._mem.read(size)

    async def readline(self, size: int | None = -1) -> Any:
        if self._disk is not None:
            return await self._disk.readline(size)
        return self._mem.readline(-1 if size is None else size)

    async def readlines(self, hint: int = -1) -> list[Any]:
        if self._disk is not None:
            return list(await self._disk.readlines(hint))
        return list(self._mem.readlines(hint))

    async def seek(self, offset: int, whence: int = 0) -> int:
        if self._disk is not None:
            return int(await self._disk.seek(offset, whence))
        return int(self._mem.seek(offset, whence))

    async def tell(self) -> int:
        return int(await self._disk.tell()) if self._disk is not None else int(self._mem.tell())

    async def truncate(self, size: int | None = None) -> int:
        if self._disk is not None:
            return int(await self._disk.truncate(size))
        return int(self._mem.truncate(size))

    async def flush(self) -> None:
        if self._disk is not None:
            await self._disk.flush()
        else:
            self._mem.flush()

    async def isatty(self) -> bool:
        return False

    async def fileno(self) -> int:
        """The file descriptor — which needs a file: rolls over first, as the stdlib does."""
        await self.rollover()
        return int(self._disk.fileno())

    async def close(self) -> None:
        if self._disk is not None:
            await self._disk.close()
        elif self._mem is not None:
            self._mem.close()

    @property
    def closed(self) -> bool:
        return bool(self._file.closed)

    @property
    def mode(self) -> str:
        return str(self._disk.mode) if self._disk is not None else self._mode

    @property
    def name(self) -> Any:
        """None while in memory; then the file's name (its fd: it has no path)."""
        return None if self._disk is None else self._disk.name

    @property
    def encoding(self) -> str:
        return str(self._file.encoding)  # AttributeError for binary files, as the stdlib's

    @property
    def newlines(self) -> Any:
        return self._file.newlines

    def __repr__(self) -> str:
        where = "on disk" if self._disk is not None else "in memory"
        return f"<AsyncSpooledTemporaryFile {where} mode={self.mode!r}>"


def SpooledTemporaryFile(  # noqa: N802
    max_size: int = 0,
    mode: str = "w+b",
    buffering: int = -1,
    encoding: str | None = None,
    newline: str | None = None,
    suffix: str | None = None,
    prefix: str | None = None,
    dir: str | None = None,  # noqa: A002
    *,
    errors: str | None = None,
) -> _Context:
    """A temporary file kept in memory until it grows past `max_size` bytes (0: no
    limit) or `rollover()`/`fileno()` is called, then moved to a `TemporaryFile`."""

    async def make() -> AsyncSpooledTemporaryFile:
        return AsyncSpooledTemporaryFile(
            max_size, mode, buffering, encoding, newline, errors, suffix, prefix, dir
        )

    return _Context(make, lambda f: f)
