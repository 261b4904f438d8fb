"""Where io_uring is really blocked (a seccomp filter in a child process), uringkit.aio
serves O_DIRECT files through libaio and everything else through threads — same API,
same results."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = r"""
import asyncio, errno, json, os, sys
from uringkit.testing import block_io_uring
block_io_uring()
from uringkit import aio

path = sys.argv[1]
data = open(path, "rb").read()

async def main():
    out = {"backend": aio.backend_name()}
    async with await aio.open(path, "rb", direct=True) as f:
        sem = asyncio.Semaphore(64)
        async def one(i):
            async with sem:
                off = (i * 7 % 256) * 4096
                return await f.read_at(4096, off) == data[off:off + 4096]
        out["direct_reads_ok"] = all(await asyncio.gather(*(one(i) for i in range(500))))
        ranges = [((i * 37) % 256 * 4096, 4096) for i in range(64)]
        got = await aio.read_many(f, ranges)
        out["read_many_ok"] = got == [data[o:o + n] for o, n in ranges]
        out["unaligned_read_ok"] = await f.read_at(100, 3) == data[3:103]
    async with await aio.open(path + ".w", "wb", direct=True) as w:
        from uringkit import aligned_buffer
        b = aligned_buffer(8192)
        memoryview(b)[:] = data[:8192]
        out["direct_write"] = await w.write_at(b, 4096)
        try:
            await w.write_at(bytes(100), 3)
            out["misaligned"] = "no error"
        except OSError as e:
            out["misaligned"] = [e.errno, str(e)]
    out["written_ok"] = open(path + ".w", "rb").read()[4096:] == data[:8192]
    async with await aio.open(path, "rb") as f:
        out["buffered_ok"] = await f.read(100) == data[:100]
    print(json.dumps(out))

asyncio.run(main())
"""


def test_libaio_serves_direct_io_when_io_uring_is_blocked(tmp_path: Path) -> None:
    p = tmp_path / "d.bin"
    p.write_bytes(os.urandom(1 << 20))
    try:
        os.close(os.open(p, os.O_RDONLY | os.O_DIRECT))
    except OSError as e:
        pytest.skip(f"no O_DIRECT here: {e}")
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(p)], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    r = json.loads(out.stdout)
    assert r["backend"] == "libaio"
    assert r["direct_reads_ok"] is True
    assert r["read_many_ok"] is True
    assert r["unaligned_read_ok"] is True  # reads of any range: the covering blocks
    assert r["misaligned"][0] == 22 and "align" in r["misaligned"][1]  # writes: explained
    assert r["direct_write"] == 8192 and r["written_ok"] is True
    assert r["buffered_ok"] is True
