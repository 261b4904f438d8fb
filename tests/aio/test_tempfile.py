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
