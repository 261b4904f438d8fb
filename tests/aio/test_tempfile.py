"""aio.tempfile against aiofiles.tempfile: the same operations, the same results."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest

from uringkit import aio

aiofiles_tempfile = pytest.importorskip("aiofiles.tempfile")


async def _script(tf: Any, tmp: str) -> list[Any]:
    out: list[Any] = []
    async with tf.NamedTemporaryFile("w+b", dir=tmp, prefix="n-") as f:
        name = f.name
        out.append(os.path.exists(name) and os.path.basename(name).startswith("n-"))
        out.append(await f.write(b"hello"))
        out.append(await f.seek(0))
        out.append(await f.read())
    out.append(os.path.exists(name))  # removed on close
    f = await tf.NamedTemporaryFile("w", dir=tmp, delete=False, encoding="utf-8")
    await f.write("kept ✓")
    await f.close()
    with open(f.name, encoding="utf-8") as g:
        out.append(g.read())
    os.unlink(f.name)
    async with tf.TemporaryFile("w+") as t:
        await t.write("anon")
        await t.seek(0)
        out.append(await t.read())
    async with tf.TemporaryDirectory(dir=tmp, suffix="-d") as d:
        out.append(isinstance(d, str) and d.endswith("-d") and os.path.isdir(d))
        with open(os.path.join(d, "inner"), "w") as g:
            g.write("x")
    out.append(os.path.exists(d))  # removed with what it held
    td = await tf.TemporaryDirectory(dir=tmp)
    out.append(os.path.isdir(td.name))
    await td.cleanup()
    out.append(os.path.exists(td.name))
    return out


def test_same_as_aiofiles(tmp_path: Any, run: Callable[..., Any]) -> None:
    want = [True, 5, 0, b"hello", False, "kept ✓", "anon", True, False, True, False]
    assert run(lambda: _script(aio.tempfile, str(tmp_path))) == want
    assert run(lambda: _script(aiofiles_tempfile, str(tmp_path))) == want
    assert os.listdir(tmp_path) == []


def test_named_file_removed_even_if_never_closed(tmp_path: Any, run: Callable[..., Any]) -> None:
    async def go() -> str:
        f = await aio.tempfile.NamedTemporaryFile(dir=str(tmp_path))
        await f.write(b"x")
        name: str = f.name
        del f  # dropped: closed (with a ResourceWarning) and removed, as the stdlib does
        return name

    with pytest.warns(ResourceWarning):
        name = run(go)
        import gc

        gc.collect()
    assert not os.path.exists(name)


async def _spooled(tf: Any, tmp: str) -> list[Any]:
    """SpooledTemporaryFile: in memory below max_size (no name), rolled over past it or
    on fileno() (named by its descriptor), the data and position carried over; binary
    and text."""
    out: list[Any] = []
    async with tf.SpooledTemporaryFile(max_size=16, dir=tmp) as f:
        out.append(await f.write(b"0123456789"))
        out.append((f.name, f.closed))  # in memory: no name
        await f.writelines([b"abc", b"def"])  # 16 bytes: not past max_size
        out.append(f.name is None)
        out.append(await f.write(b"!"))  # 17: rolled over to a file
        out.append((isinstance(f.name, int), await f.tell()))
        out.append(await f.seek(4))
        out.append(await f.read(6))
        out.append(await f.truncate(12))
        await f.seek(0)
        out.append(await f.read())
    out.append(f.closed)
    async with tf.SpooledTemporaryFile(mode="w+", encoding="utf-8", dir=tmp) as t:
        out.append(await t.write("ünï\nline 2\n"))
        out.append((t.name, t.encoding, t.mode))
        await t.seek(0)
        out.append([line async for line in t])
        await t.seek(0)
        out.append(await t.readline())
        out.append(await t.readlines())
        fd = await t.fileno()  # a descriptor needs a file: rolled over
        out.append((isinstance(fd, int), t.name == fd, await t.tell()))
        await t.seek(0)
        out.append(await t.read())
    async with tf.SpooledTemporaryFile(max_size=4, dir=tmp) as r:
        await r.write(b"ab")
        await r.rollover()
        await r.rollover()  # once is enough
        out.append((isinstance(r.name, int), await r.tell()))
        await r.write(b"cd")
        await r.seek(0)
        out.append(await r.read())
    return out


def test_spooled_same_as_aiofiles(tmp_path: Any, run: Callable[..., Any]) -> None:
    ours = run(lambda: _spooled(aio.tempfile, str(tmp_path)))
    theirs = run(lambda: _spooled(aiofiles_tempfile, str(tmp_path)))
    assert ours == theirs
    assert ours[1] == (None, False) and ours[4] == (True, 17)
    assert os.listdir(tmp_path) == []  # rolled-over files have no name either
