"""uringkit.aio.os against os and aiofiles.os: same results, same exceptions."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from uringkit import aio

aiofiles_os = pytest.importorskip("aiofiles.os")


async def _aexc(coro: Any) -> Any:
    try:
        return await coro
    except OSError as e:
        return (type(e), e.errno, e.filename and os.fsdecode(e.filename))


def test_stat_matches(tmp_path: Path, run: Any) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"x" * 1234)
    os.symlink(p, tmp_path / "l")
    want = os.stat(p)
    lwant = os.stat(tmp_path / "l", follow_symlinks=False)

    async def go() -> Any:
        fd = os.open(p, os.O_RDONLY)
        try:
            return (
                await aio.os.stat(p),
                await aio.os.stat(tmp_path / "l", follow_symlinks=False),
                await aio.os.stat(fd),
            )
        finally:
            os.close(fd)

    st, lst, fst = run(go)
    for got in (st, fst):
        assert tuple(got) == tuple(want)
        assert got.st_mtime_ns == want.st_mtime_ns and got.st_blocks == want.st_blocks
        assert got.st_atime == want.st_atime
    assert tuple(lst) == tuple(lwant)


def test_every_aiofiles_os_name_is_here() -> None:
    """`from uringkit import aio` in place of aiofiles: every function of aiofiles.os and
    aiofiles.os.path exists, and is a coroutine function where aiofiles' is."""
    import inspect

    import aiofiles.os
    import aiofiles.ospath

    for theirs, ours in ((aiofiles.os, aio.os), (aiofiles.ospath, aio.os.path)):
        for name in dir(theirs):
            fn = getattr(theirs, name)
            if name.startswith("_") or not callable(fn) or name == "wrap":
                continue
            assert hasattr(ours, name), f"{ours.__name__}.{name} is missing"
            if inspect.iscoroutinefunction(fn):
                assert inspect.iscoroutinefunction(getattr(ours, name)), name


def test_namespace_ops(tmp_path: Path, run: Any) -> None:
    d = tmp_path

    async def go() -> list[Any]:
        out: list[Any] = []
        await aio.os.mkdir(d / "sub")
        out.append(await aio.os.path.isdir(d / "sub"))
        (d / "sub" / "a").write_text("A")
        await aio.os.rename(d / "sub" / "a", d / "sub" / "b")
        out.append(sorted(await aio.os.listdir(d / "sub")))
        await aio.os.link(d / "sub" / "b", d / "sub" / "hard")
        await aio.os.symlink("b", d / "sub" / "soft")
        out.append(await aio.os.readlink(d / "sub" / "soft"))
        out.append(await aio.os.path.islink(d / "sub" / "soft"))
        out.append(await aio.os.path.isfile(d / "sub" / "soft"))
        out.append(await aio.os.path.getsize(d / "sub" / "hard"))
        out.append(await aio.os.path.samefile(d / "sub" / "b", d / "sub" / "hard"))
        with open(d / "sub" / "b") as f1, open(d / "sub" / "hard") as f2:
            out.append(await aio.os.path.sameopenfile(f1.fileno(), f2.fileno()))
        (d / "sub" / "c").write_text("C")
        await aio.os.replace(d / "sub" / "c", d / "sub" / "b")
        out.append((d / "sub" / "b").read_text())
        for n in ("b", "soft", "hard"):
            await aio.os.remove(d / "sub" / n)
        await aio.os.rmdir(d / "sub")
        out.append(await aio.os.path.exists(d / "sub"))
        out.append([e.name for e in await aio.os.scandir(d)])
        await aio.os.makedirs(d / "x" / "y")
        out.append(await aio.os.access(d / "x" / "y", os.W_OK))
        out.append((await aio.os.statvfs(d)).f_bsize > 0)
        return out

    assert run(go) == [True, ["b"], "b", True, True, 1, True, True, "C", False, [], True, True]


@pytest.mark.parametrize(
    "op", ["stat", "remove", "rmdir", "mkdir", "rename", "link", "symlink", "unlink"]
)
def test_errors_match(tmp_path: Path, run: Any, op: str) -> None:
    (tmp_path / "file").write_text("x")
    (tmp_path / "dir").mkdir()
    args: dict[str, tuple[Any, ...]] = {
        "stat": (tmp_path / "missing",),
        "remove": (tmp_path / "missing",),
        "unlink": (tmp_path / "dir",),
        "rmdir": (tmp_path / "file",),
        "mkdir": (tmp_path / "dir",),
        "rename": (tmp_path / "missing", tmp_path / "other"),
        "link": (tmp_path / "missing", tmp_path / "other"),
        "symlink": ("file", tmp_path / "file"),
    }
    a = args[op]
    try:
        getattr(os, op)(*a)
        raise AssertionError("expected an error")
    except OSError as e:
        want = (type(e), e.errno, e.filename and os.fsdecode(e.filename))

    async def go() -> Any:
        return (await _aexc(getattr(aio.os, op)(*a)), await _aexc(getattr(aiofiles_os, op)(*a)))

    ours, theirs = run(go)
    assert ours == want
    assert theirs == want


def test_path_helpers_missing(tmp_path: Path, run: Any) -> None:
    async def go() -> list[bool]:
        m = tmp_path / "nope"
        return [
            await aio.os.path.exists(m),
            await aio.os.path.isfile(m),
            await aio.os.path.isdir(m),
            await aio.os.path.islink(m),
        ]

    assert run(go) == [False, False, False, False]


def test_stat_from_memory_when_it_can_be(tmp_path: Path, run: Any) -> None:
    """A hot file on a local filesystem is stat'ed inline (io_uring's STATX always goes
    to a worker thread: ~40 µs); other filesystems (here /proc) still go through the
    ring, with the same answers as os.stat."""
    from uringkit.aio._backend import RingBackend, get_backend

    p = tmp_path / "f"
    p.write_bytes(b"abc")
    os.stat(p)

    async def go() -> Any:
        await aio.os.stat("/")
        b = get_backend()
        calls = (lambda: b.ring.submit_calls) if isinstance(b, RingBackend) else (lambda: 0)
        c0 = calls()
        st = await aio.os.stat(p)
        c1 = calls()
        proc = await aio.os.stat("/proc/self")
        c2 = calls()
        return st, c1 - c0, proc, c2 - c1, isinstance(b, RingBackend)

    st, hot_submits, proc, proc_submits, ring = run(go)
    assert tuple(st) == tuple(os.stat(p))
    assert proc.st_ino == os.stat("/proc/self").st_ino
    assert hot_submits == 0
    if ring:
        assert proc_submits == 1


@pytest.mark.parametrize("blocking", [True, False])
def test_sendfile(tmp_path: Path, run: Any, blocking: bool) -> None:
    """aio.os.sendfile sends what os.sendfile would (file -> socket, from an offset, to
    the end of the file) without stopping early — also into a non-blocking socket whose
    buffer fills (it waits for room instead of raising BlockingIOError)."""
    import asyncio
    import socket

    data = os.urandom(700_000)  # several 64 KiB pipe loads, more than a socket buffer
    p = tmp_path / "f"
    p.write_bytes(data)

    async def go() -> tuple[int, int, bytes]:
        a, b = socket.socketpair()
        a.setblocking(blocking)
        b.setblocking(False)
        loop = asyncio.get_running_loop()
        fd = os.open(p, os.O_RDONLY)
        try:

            async def receive() -> bytes:
                chunks = []
                while chunk := await loop.sock_recv(b, 1 << 16):
                    chunks.append(chunk)
                return b"".join(chunks)

            reader = asyncio.ensure_future(receive())
            sent = await aio.os.sendfile(a.fileno(), fd, 1000, len(data))  # past EOF: the rest
            tail = await aio.os.sendfile(a.fileno(), fd, len(data), 10)  # at EOF: nothing
            a.shutdown(socket.SHUT_WR)
            return sent, tail, await reader
        finally:
            os.close(fd)
            a.close()
            b.close()

    sent, tail, got = run(go)
    assert sent == len(data) - 1000 and tail == 0
    assert got == data[1000:]
