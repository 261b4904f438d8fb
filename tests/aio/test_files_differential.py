"""Differential tests: the same operations through uringkit.aio, through aiofiles and
through the sync stdlib must give the same contents, positions and exceptions."""

from __future__ import annotations

import errno
import io
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from uringkit import aio

from conftest import evict_file

aiofiles = pytest.importorskip("aiofiles")

BINARY = b"first line\nsecond\r\nthird\rfourth" + bytes(range(256)) * 300 + b"\nlast"
TEXT = "héllo wörld\nzweite Zeile\r\ndritte\rvierte\n" + "ñ" * 70000 + "\nend"


def sync_script(path: Path, mode_r: str, **kw: Any) -> list[Any]:
    out: list[Any] = []
    with open(path, mode_r, **kw) as f:
        out.append(f.read(5))
        out.append(f.tell())
        out.append(f.readline())
        out.append(f.readline(3))
        out.append(f.readlines()[:3])
        out.append(f.tell())
        out.append(f.seek(0))
        out.append(f.read())
        out.append(f.read())
    with open(path, mode_r, **kw) as f:
        out.append(list(f))
    return out


async def async_script(opener: Callable[..., Any], path: Path, mode_r: str, **kw: Any) -> list[Any]:
    out: list[Any] = []
    async with opener(path, mode_r, **kw) as f:
        out.append(await f.read(5))
        out.append(await f.tell())
        out.append(await f.readline())
        out.append(await f.readline(3))
        out.append((await f.readlines())[:3])
        out.append(await f.tell())
        out.append(await f.seek(0))
        out.append(await f.read())
        out.append(await f.read())
    async with opener(path, mode_r, **kw) as f:
        out.append([line async for line in f])
    return out


def ours(*a: Any, **kw: Any) -> Any:
    # as aiofiles.open: usable with `async with` directly (and awaitable)
    return aio.open(*a, **kw)


def test_binary_reads(tmp_path: Path, run: Any) -> None:
    p = tmp_path / "b.bin"
    p.write_bytes(BINARY)
    want = sync_script(p, "rb")
    assert run(lambda: async_script(ours, p, "rb")) == want
    assert run(lambda: async_script(aiofiles.open, p, "rb")) == want


def test_read_all_of_sizeless_growing_and_shrinking_files(tmp_path: Path, run: Any) -> None:
    """read() to EOF reads what fstat says is there in one read, and still reads files
    whose size says nothing (procfs: 0) and files that grew or shrank since open — as
    the stdlib and aiofiles do."""
    p = tmp_path / "g.bin"
    p.write_bytes(b"a" * 5000)

    async def script(opener: Callable[..., Any]) -> list[Any]:
        out: list[Any] = []
        async with opener("/proc/self/mounts", "rb") as f:
            out.append(len(await f.read()) > 0)
        async with opener(p, "rb") as f:
            out.append(await f.read(10))
            with open(p, "ab") as g:
                g.write(b"b" * 70000)  # grows after open, before read()
            out.append(await f.read())
            out.append(await f.read())
            os.truncate(p, 100)  # shrinks below the position
            out.append(await f.read())
            await f.seek(50)
            out.append(await f.read())
        p.write_bytes(b"a" * 5000)
        return out

    want = [True, b"a" * 10, b"a" * 4990 + b"b" * 70000, b"", b"", b"a" * 50]
    assert run(lambda: script(ours)) == want
    assert run(lambda: script(aiofiles.open)) == want


@pytest.mark.parametrize("newline", [None, "", "\n", "\r\n"])
def test_text_reads(tmp_path: Path, run: Any, newline: str | None) -> None:
    p = tmp_path / "t.txt"
    p.write_bytes(TEXT.encode("utf-8"))
    want = sync_script(p, "r", encoding="utf-8", newline=newline)
    got = run(lambda: async_script(ours, p, "r", encoding="utf-8", newline=newline))
    assert got == want
    assert (
        run(lambda: async_script(aiofiles.open, p, "r", encoding="utf-8", newline=newline)) == want
    )


async def _writes(opener: Callable[..., Any], path: Path) -> list[Any]:
    out: list[Any] = []
    async with opener(path, "wb") as f:
        out.append(await f.write(b"0123456789"))
        out.append(await f.tell())
        out.append(await f.seek(3))
        out.append(await f.write(b"abc"))
        out.append(await f.tell())
        await f.writelines([b"X", b"Y"])
        out.append(await f.seek(0, os.SEEK_END))
        out.append(await f.truncate(8))
        await f.flush()
    async with opener(path, "ab") as f:
        out.append(await f.write(b"+tail"))
        out.append(await f.tell())
    async with opener(path, "r+b") as f:
        out.append(await f.read(2))
        out.append(await f.write(b"__"))
        out.append(await f.tell())
    async with opener(path, "w", encoding="utf-8") as f:
        out.append(await f.write("ünïcode\nline two\n"))
    async with opener(path, "a", encoding="utf-8") as f:
        out.append(await f.write("appended\n"))
    out.append(path.read_bytes())
    return out


def _writes_sync(path: Path) -> list[Any]:
    out: list[Any] = []
    with open(path, "wb") as f:
        out.append(f.write(b"0123456789"))
        out.append(f.tell())
        out.append(f.seek(3))
        out.append(f.write(b"abc"))
        out.append(f.tell())
        f.writelines([b"X", b"Y"])
        out.append(f.seek(0, os.SEEK_END))
        out.append(f.truncate(8))
        f.flush()
    with open(path, "ab") as f:
        out.append(f.write(b"+tail"))
        out.append(f.tell())
    with open(path, "r+b") as f:
        out.append(f.read(2))
        out.append(f.write(b"__"))
        out.append(f.tell())
    with open(path, "w", encoding="utf-8") as f:
        out.append(f.write("ünïcode\nline two\n"))
    with open(path, "a", encoding="utf-8") as f:
        out.append(f.write("appended\n"))
    out.append(path.read_bytes())
    return out


def test_writes(tmp_path: Path, run: Any) -> None:
    want = _writes_sync(tmp_path / "s")
    assert run(lambda: _writes(ours, tmp_path / "o")) == want
    assert run(lambda: _writes(aiofiles.open, tmp_path / "a")) == want


def _exc(fn: Callable[[], Any]) -> tuple[type, int | None] | None:
    try:
        fn()
    except Exception as e:  # noqa: BLE001
        return type(e), getattr(e, "errno", None)
    return None


async def _aexc(coro: Any) -> tuple[type, int | None] | None:
    try:
        await coro
    except Exception as e:  # noqa: BLE001
        return type(e), getattr(e, "errno", None)
    return None


CASES: list[tuple[str, str, dict[str, Any]]] = [
    ("missing", "r", {}),
    ("dir", "r", {}),
    ("exists", "x", {}),
    ("exists", "rw", {}),
    ("exists", "rt+b", {}),
    ("exists", "rb", {"encoding": "utf-8"}),
    ("exists", "r", {"newline": "x"}),
    ("missing", "rb", {}),
]


@pytest.mark.parametrize(("which", "mode", "kw"), CASES)
def test_open_errors(tmp_path: Path, run: Any, which: str, mode: str, kw: dict[str, Any]) -> None:
    (tmp_path / "exists").write_text("x")
    (tmp_path / "dir").mkdir()
    p = tmp_path / which
    want = _exc(lambda: open(p, mode, **kw).close())
    assert want is not None

    async def both() -> tuple[Any, Any]:
        return (await _aexc(aio.open(p, mode, **kw)), await _aexc(aiofiles.open(p, mode, **kw)))

    got_ours, got_aiofiles = run(both)
    assert got_ours == want
    assert got_aiofiles == want


def test_open_is_awaitable_and_an_async_context_manager(tmp_path: Path, run: Any) -> None:
    """Both ways aiofiles.open is used: `async with open(...)` closes on exit, `await
    open(...)` hands the file over."""
    p = tmp_path / "f"
    p.write_bytes(b"data")

    async def go(opener: Callable[..., Any]) -> list[Any]:
        async with opener(p, "rb") as f:
            first = await f.read()
        g = await opener(p, "rb")
        out = [first, f.closed, g.closed, await g.read()]
        await g.close()
        return out

    want = [b"data", True, False, b"data"]
    assert run(lambda: go(aio.open)) == want
    assert run(lambda: go(aiofiles.open)) == want


@pytest.mark.parametrize("mode", ["r", "rt", "r+", "w+", "a", "rb", "r+b", "rb+", "wb", "ab+"])
def test_mode_and_capability_methods(tmp_path: Path, run: Any, mode: str) -> None:
    """`mode` as the stdlib spells it, and aiofiles' split between plain and awaitable
    methods: binary `readable()`/`fileno()` plain, `writable()/seekable()/isatty()`
    awaitable; text: all four awaitable."""
    p = tmp_path / "f"
    p.write_bytes(b"abc\ndef\n")
    with open(p, mode) as f:
        want = [f.mode, f.readable(), f.writable(), f.seekable(), f.isatty()]

    async def go(opener: Callable[..., Any]) -> list[Any]:
        async with opener(p, mode) as f:
            r = f.readable()
            if "b" not in mode:
                r = await r
            return [f.mode, r, await f.writable(), await f.seekable(), await f.isatty()]

    assert run(lambda: go(aio.open)) == want
    assert run(lambda: go(aiofiles.open)) == want


def test_peek(tmp_path: Path, run: Any) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"0123456789")

    async def go(opener: Callable[..., Any]) -> list[Any]:
        async with opener(p, "rb") as f:
            first = await f.peek(3)
            out = [first[:1], await f.tell(), await f.read(4)]
            nxt = await f.peek()
            out += [nxt[:1], await f.read(), await f.peek()]
        return out

    want = [b"0", 0, b"0123", b"4", b"456789", b""]
    assert run(lambda: go(aio.open)) == want
    assert run(lambda: go(aiofiles.open)) == want


def test_wrong_direction_and_closed(tmp_path: Path, run: Any) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"data")

    async def go() -> list[Any]:
        out = []
        f = await aio.open(p, "rb")
        out.append(await _aexc(f.write(b"x")))
        await f.close()
        out.append(await _aexc(f.read()))
        g = await aio.open(p, "wb")
        out.append(await _aexc(g.read()))
        out.append(await _aexc(g.write("text")))
        await g.close()
        return out

    got = run(go)
    assert got[0][0] is io.UnsupportedOperation
    assert got[1][0] is ValueError
    assert got[2][0] is io.UnsupportedOperation
    assert got[3][0] is TypeError


@pytest.mark.parametrize(("offset", "whence"), [(0, 7), (-1, os.SEEK_SET), (-100, os.SEEK_CUR)])
def test_bad_seeks(tmp_path: Path, run: Any, offset: int, whence: int) -> None:
    p = tmp_path / "f"
    p.write_bytes(b"data")

    def sync() -> Any:
        with open(p, "rb") as f:
            return _exc(lambda: f.seek(offset, whence)), f.tell()

    async def with_opener(opener: Callable[..., Any]) -> Any:
        async with opener(p, "rb") as f:
            return await _aexc(f.seek(offset, whence)), await f.tell()

    want = sync()
    assert want[0] is not None
    assert run(lambda: with_opener(aio.open)) == want
    assert run(lambda: with_opener(aiofiles.open)) == want


async def _buffered(opener: Callable[..., Any], path: Path) -> list[Any]:
    """What another reader sees while a file is written through a buffer (buffering=8192,
    as stdlib and aiofiles take it): small writes wait for flush/seek/read/close; a
    write bigger than the buffer goes through with everything before it."""
    out: list[Any] = []

    def seen() -> bytes:
        return path.read_bytes()

    async with opener(path, "w+b", buffering=8192) as f:
        await f.write(b"a" * 100)
        await f.write(b"b" * 100)
        out.append((await f.tell(), seen()))
        await f.flush()
        out.append(seen())
        await f.write(b"c" * 50)
        await f.write(b"D" * 20_000)
        out.append((await f.tell(), len(seen())))
        await f.write(b"e" * 10)
        out.append(await f.seek(5))
        out.append(len(seen()))
        await f.write(b"Z")
        out.append(await f.read(3))  # a read sees the write before it
        out.append(await f.tell())
    out.append(seen()[:8])
    async with opener(path, "ab", buffering=8192) as f:
        await f.write(b"tail")
        out.append((await f.tell(), len(seen())))
    out.append(seen()[-6:])
    async with opener(path, "wb", buffering=0) as f:
        await f.write(b"now")
        out.append(seen())
    async with opener(path, "w", buffering=1, encoding="utf-8") as f:
        await f.write("part")
        out.append(seen())
        await f.write(" line\nnext")
        out.append(seen())
    out.append(seen())
    return out


def _buffered_sync(path: Path) -> list[Any]:
    out: list[Any] = []

    def seen() -> bytes:
        return path.read_bytes()

    with open(path, "w+b", buffering=8192) as f:
        f.write(b"a" * 100)
        f.write(b"b" * 100)
        out.append((f.tell(), seen()))
        f.flush()
        out.append(seen())
        f.write(b"c" * 50)
        f.write(b"D" * 20_000)
        out.append((f.tell(), len(seen())))
        f.write(b"e" * 10)
        out.append(f.seek(5))
        out.append(len(seen()))
        f.write(b"Z")
        out.append(f.read(3))
        out.append(f.tell())
    out.append(seen()[:8])
    with open(path, "ab", buffering=8192) as f:
        f.write(b"tail")
        out.append((f.tell(), len(seen())))
    out.append(seen()[-6:])
    with open(path, "wb", buffering=0) as f:
        f.write(b"now")
        out.append(seen())
    with open(path, "w", buffering=1, encoding="utf-8") as f:
        f.write("part")
        out.append(seen())
        f.write(" line\nnext")
        out.append(seen())
    out.append(seen())
    return out


def test_write_buffering(tmp_path: Path, run: Any) -> None:
    want = _buffered_sync(tmp_path / "s")
    assert run(lambda: _buffered(ours, tmp_path / "o")) == want
    assert run(lambda: _buffered(aiofiles.open, tmp_path / "a")) == want


def test_unclosed_file_is_flushed_when_dropped(tmp_path: Path, run: Any) -> None:
    """Like the stdlib's files: dropped without close(), buffered data is written out
    (with a ResourceWarning) instead of lost."""
    import gc
    import warnings

    p = tmp_path / "f"

    async def go() -> None:
        f = await aio.open(p, "wb")
        await f.write(b"kept")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            del f
            gc.collect()
        assert any(issubclass(x.category, ResourceWarning) for x in w)

    run(go)
    assert p.read_bytes() == b"kept"


def test_write_error_surfaces_at_flush_and_close(small_fs: Path, run: Any) -> None:
    """A full disk found when the buffer is written out raises there (flush, or close —
    which still closes the file), as with the stdlib."""
    with open(small_fs / "filler", "wb", buffering=0) as fill:
        with pytest.raises(OSError) as full:
            while True:
                fill.write(b"\0" * 65536)
        assert full.value.errno == errno.ENOSPC
        while True:  # the last pages too
            try:
                fill.write(b"\0" * 512)
            except OSError:
                break
    p = small_fs / "f"

    async def go() -> tuple[Any, Any, bool]:
        f = await aio.open(p, "wb")
        await f.write(b"y" * 100)  # buffered: no error yet
        with pytest.raises(OSError) as at_flush:
            await f.flush()
        await f.write(b"z" * 100)
        with pytest.raises(OSError) as at_close:
            await f.close()
        g = await aio.open(p, "r+b", buffering=0)
        with pytest.raises(OSError) as unbuffered:
            await g.write_at(b"w" * 8192, 1 << 20)
        await g.close()
        return (
            at_flush.value.errno,
            at_close.value.errno,
            f.closed,
            unbuffered.value.errno,
            {at_flush.value.filename, at_close.value.filename, unbuffered.value.filename},
        )

    # ENOSPC with the path, wherever it surfaces (as the stdlib reports it)
    assert run(go) == (errno.ENOSPC, errno.ENOSPC, True, errno.ENOSPC, {str(p)})


def test_concurrent_writes_on_one_file_do_not_overlap(tmp_path: Path, run: Any) -> None:
    """Tasks writing to the same file object concurrently each get their own range (the
    stdlib's buffered writer, which aiofiles uses from threads, serializes them the same
    way): nothing is overwritten, whatever sizes mix."""
    import asyncio

    p = tmp_path / "f"
    pieces = [bytes([65 + i % 26]) * (100 if i % 3 else 100_000) for i in range(30)]

    async def go() -> int:
        async with await aio.open(p, "wb") as f:
            await asyncio.gather(*(f.write(x) for x in pieces))
            return await f.tell()

    end = run(go)
    data = p.read_bytes()
    assert end == len(data) == sum(map(len, pieces))
    assert sorted(data.count(bytes([65 + i % 26])) for i in range(26)) == sorted(
        sum(len(x) for x in pieces if x[:1] == bytes([65 + i % 26])) for i in range(26)
    )


def test_concurrent_reads_get_consecutive_pieces(tmp_path: Path, run: Any) -> None:
    import asyncio

    p = tmp_path / "f"
    data = os.urandom(1 << 20)
    p.write_bytes(data)

    async def go() -> list[bytes]:
        async with await aio.open(p, "rb") as f:
            return list(await asyncio.gather(*(f.read(40_000) for _ in range(30))))

    got = run(go)
    assert b"".join(got) == data[: len(b"".join(got))]
    assert sum(map(len, got)) == min(len(data), 30 * 40_000)


def test_reads_of_a_file_not_in_the_page_cache(tmp_path: Path, run: Any) -> None:
    """Every way to read gets the data of a file evicted from the page cache — where the
    inline RWF_NOWAIT attempt is refused (EAGAIN) and the read goes to the ring. (Until
    session 30 readinto took that EAGAIN for the end of the file and returned 0; found
    by tests/aio/test_files_random.py.)"""
    p = tmp_path / "cold"
    data = os.urandom(1 << 20)
    p.write_bytes(data)

    async def reads() -> list[bytes]:
        out: list[bytes] = []
        for how in ("readinto", "read", "readline", "read_at", "readinto_at"):
            evict_file(p)
            async with aio.open(p, "rb") as f:
                await f.seek(300_000)
                if how == "readinto":
                    b = bytearray(100_000)
                    out.append(bytes(b[: await f.readinto(b)]))
                elif how == "read":
                    out.append(await f.read(100_000))
                elif how == "readline":
                    out.append(await f.readline(100_000))
                elif how == "read_at":
                    out.append(await f.read_at(100_000, 300_000))
                else:
                    b = bytearray(100_000)
                    out.append(bytes(b[: await f.readinto_at(b, 300_000)]))
        return out

    want = data[300_000:400_000]
    got = run(reads)
    assert got[0] == want and got[1] == want and got[3] == want and got[4] == want
    assert got[2] == want[: want.find(b"\n") + 1 or 100_000]
