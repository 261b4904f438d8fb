"""Temporary files and directories for asyncio, with `aiofiles.tempfile`'s names.

    async with aio.tempfile.NamedTemporaryFile("w+b") as f:   # removed on close
        await f.write(b"data"); await f.seek(0); await f.read()
    async with aio.tempfile.TemporaryDirectory() as path: ...  # removed on exit

The files are `uringkit.aio` files (I/O through the loop's ring); creating them and
removing a directory tree run on the backend's thread pool, as aiofiles does.
`SpooledTemporaryFile` (in-memory until a size) is not provided.
"""

from __future__ import annotations

import os as _os
import shutil
import tempfile as _tempfile
from collections.abc import Callable, Coroutine, Generator
from typing import Any

from ._backend import get_backend

__all__ = ["NamedTemporaryFile", "TemporaryDirectory", "TemporaryFile"]


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
